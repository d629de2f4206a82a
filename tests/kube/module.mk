# Kube client tests.  "with_fake_apiserver" tests run against
# tests/fakes/apiserver/fake_apiserver.py, a kube-apiserver stand-in.
KUBE_TEST_LIBS := kube common
KUBE_TEST_LDLIBS := $(kube_LDLIBS) $(shell $(PKG_CONFIG) --libs cmocka)
KUBE_TESTLIB_SRCS := tests/kube/kube_testlib.c tests/fakes/apiserver/fake_apiserver_proc.c

TEST_PROGS += test_kube_client_with_fake_apiserver
test_kube_client_with_fake_apiserver_SRCS := tests/kube/test_kube_client_with_fake_apiserver.c \
	$(KUBE_TESTLIB_SRCS)
test_kube_client_with_fake_apiserver_LIBS := $(KUBE_TEST_LIBS)
test_kube_client_with_fake_apiserver_LDLIBS := $(KUBE_TEST_LDLIBS)
test_kube_client_with_fake_apiserver_CFLAGS := -I.
