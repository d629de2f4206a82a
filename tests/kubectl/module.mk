TEST_SCRIPTS += tests/kubectl/test_kubectl_plugin_with_fake_apiserver.py

# The exposition reader of `top` (untrusted text from the agents).
FUZZ_TARGETS += fuzz_kubectl_expfmt
fuzz_kubectl_expfmt_SRCS := tests/kubectl/fuzz_kubectl_expfmt.c src/kubectl/expfmt.c
