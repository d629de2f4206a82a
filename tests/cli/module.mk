TEST_SCRIPTS += tests/cli/test_cli.sh
