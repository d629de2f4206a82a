# Images: runtime libraries of the shipped binaries vs the package list;
# the MPS component rendered over the base.
TEST_SCRIPTS += tests/deploy/test_runtime_libs.sh
TEST_SCRIPTS += tests/deploy/test_deploy_mps.sh
