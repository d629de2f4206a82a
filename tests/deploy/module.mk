# Images: runtime libraries of the shipped binaries vs the package list.
TEST_SCRIPTS += tests/deploy/test_runtime_libs.sh
