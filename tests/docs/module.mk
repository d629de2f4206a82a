# Docs that cannot drift (docs/contributing.md, "Docs that cannot drift"):
# flags, config keys, metric names and measured figures in README.md and
# docs/*.md checked against the programs' --help, the sources and bench/results.
TEST_SCRIPTS += tests/docs/check_docs.py
