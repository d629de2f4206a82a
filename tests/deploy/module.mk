# Images: runtime libraries of the shipped binaries vs the package list; the
# image builds (one script for make images and the Dockerfiles) and, once
# `make images` has run, the archives themselves; every Kubernetes version's
# overlay; the MPS component rendered over the base; MPS and CDI under the
# agent's read-only root (the mounts they need; the agent writes nowhere else).
TEST_SCRIPTS += tests/deploy/test_runtime_libs.sh
TEST_SCRIPTS += tests/deploy/test_images.sh
TEST_SCRIPTS += tests/deploy/test_deploy_versions.sh
TEST_SCRIPTS += tests/deploy/test_deploy_mps.sh
TEST_SCRIPTS += tests/deploy/test_deploy_readonly_root.sh
