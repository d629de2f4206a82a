# The test runner and test-repeat checked on stand-in TAP producers.
TEST_SCRIPTS += tests/runner/test_run_tests.sh
