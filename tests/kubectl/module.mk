TEST_SCRIPTS += tests/kubectl/test_kubectl_plugin_with_fake_apiserver.py
# defrag: plans and the --apply path (Eviction API, PDBs, surprises)
TEST_SCRIPTS += tests/kubectl/test_kubectl_defrag_with_fake_apiserver.py

# The reader of the agents' /metrics (untrusted text) that `top` and the
# scheduler's dashboard share (src/contracts/agent_usage.c).
FUZZ_TARGETS += fuzz_agent_usage
fuzz_agent_usage_SRCS := tests/kubectl/fuzz_agent_usage.c src/contracts/agent_usage.c
fuzz_agent_usage_LDLIBS := $(shell $(PKG_CONFIG) --libs jansson)
