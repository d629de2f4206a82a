# End-to-end: real gpuvisor-scheduler + gpuvisor-node agents, fake NVML, kubelet and
# kube-apiserver stand-ins (see the script's header).
TEST_SCRIPTS += tests/e2e/test_e2e_with_fake_apiserver.py
