# Kube client tests.  "with_fake_apiserver" tests run against
# tests/fakes/apiserver/fake_apiserver.py, a kube-apiserver stand-in.
KUBE_TEST_LIBS := kube common
KUBE_TEST_LDLIBS := $(kube_LDLIBS) $(FAKE_APISERVER_LDLIBS) $(shell $(PKG_CONFIG) --libs cmocka)
KUBE_TESTLIB_SRCS := tests/kube/kube_testlib.c tests/fakes/apiserver/fake_apiserver_proc.c

TEST_PROGS += test_kube_client_with_fake_apiserver
test_kube_client_with_fake_apiserver_SRCS := tests/kube/test_kube_client_with_fake_apiserver.c \
	$(KUBE_TESTLIB_SRCS)
test_kube_client_with_fake_apiserver_LIBS := $(KUBE_TEST_LIBS)
test_kube_client_with_fake_apiserver_LDLIBS := $(KUBE_TEST_LDLIBS)
test_kube_client_with_fake_apiserver_CFLAGS := -I.

TEST_PROGS += test_kube_watch_with_fake_apiserver
test_kube_watch_with_fake_apiserver_SRCS := tests/kube/test_kube_watch_with_fake_apiserver.c \
	$(KUBE_TESTLIB_SRCS)
test_kube_watch_with_fake_apiserver_LIBS := $(KUBE_TEST_LIBS)
test_kube_watch_with_fake_apiserver_LDLIBS := $(KUBE_TEST_LDLIBS)
test_kube_watch_with_fake_apiserver_CFLAGS := -I.

TEST_PROGS += test_kube_config
test_kube_config_SRCS := tests/kube/test_kube_config.c
test_kube_config_LIBS := $(KUBE_TEST_LIBS)
test_kube_config_LDLIBS := $(KUBE_TEST_LDLIBS)
test_kube_config_CFLAGS := -I.

# Fuzz targets: everything the client parses from the network or from files.
FUZZ_TARGETS += fuzz_kube_watch_stream fuzz_kube_kubeconfig
fuzz_kube_watch_stream_SRCS := tests/kube/fuzz_kube_watch_stream.c src/kube/stream.c \
	src/common/gv_buf.c src/common/gv_error.c
fuzz_kube_watch_stream_LDLIBS := $(shell $(PKG_CONFIG) --libs jansson)
fuzz_kube_kubeconfig_SRCS := tests/kube/fuzz_kube_kubeconfig.c src/kube/config.c \
	src/common/gv_error.c src/common/gv_file.c
fuzz_kube_kubeconfig_LDLIBS := $(shell $(PKG_CONFIG) --libs jansson yaml-0.1) -lmbedcrypto

# Benchmark (make bench): informer sync time / cache memory, GET latency,
# conditional patch rate against fake_apiserver.
BENCH_PROGS += bench_kube_informer
bench_kube_informer_SRCS := bench/bench_kube_informer.c tests/fakes/apiserver/fake_apiserver_proc.c
bench_kube_informer_LIBS := $(KUBE_TEST_LIBS)
bench_kube_informer_LDLIBS := $(kube_LDLIBS) $(FAKE_APISERVER_LDLIBS)
bench_kube_informer_CFLAGS := -I.

TEST_PROGS += test_kube_stream
test_kube_stream_SRCS := tests/kube/test_kube_stream.c
test_kube_stream_LIBS := $(KUBE_TEST_LIBS)
test_kube_stream_LDLIBS := $(KUBE_TEST_LDLIBS)

# The stand-in itself, checked against a real client (kubectl / client-go).
TEST_SCRIPTS += tests/kube/test_fake_apiserver_with_kubectl.sh

# The transport's HTTP/1.1 response parser, without a network.
TEST_PROGS += test_kube_http_response
test_kube_http_response_SRCS := tests/kube/test_kube_http_response.c
test_kube_http_response_LIBS := $(KUBE_TEST_LIBS)
test_kube_http_response_LDLIBS := $(KUBE_TEST_LDLIBS)

FUZZ_TARGETS += fuzz_kube_http_response
fuzz_kube_http_response_SRCS := tests/kube/fuzz_kube_http_response.c src/kube/http_response.c \
	src/common/gv_error.c

# The transport against a scripted loopback server (keep-alive, stale
# pooled connections, timeout, cancel).
TEST_PROGS += test_kube_http_transport
test_kube_http_transport_SRCS := tests/kube/test_kube_http_transport.c
test_kube_http_transport_LIBS := $(KUBE_TEST_LIBS)
test_kube_http_transport_LDLIBS := $(KUBE_TEST_LDLIBS)

# The connection slots (first come, first served, deadline) and the cap on
# connections they give the transport under 200 concurrent requests.
TEST_PROGS += test_kube_conn_slots
test_kube_conn_slots_SRCS := tests/kube/test_kube_conn_slots.c
test_kube_conn_slots_LIBS := $(KUBE_TEST_LIBS)
test_kube_conn_slots_LDLIBS := $(KUBE_TEST_LDLIBS)

# TLS end to end: certificates made at run time by
# tests/fakes/apiserver/gen_test_certs.sh (openssl CLI); libcrypto for base64.
TEST_PROGS += test_kube_tls_with_fake_apiserver
test_kube_tls_with_fake_apiserver_SRCS := tests/kube/test_kube_tls_with_fake_apiserver.c \
	$(KUBE_TESTLIB_SRCS)
test_kube_tls_with_fake_apiserver_LIBS := $(KUBE_TEST_LIBS)
test_kube_tls_with_fake_apiserver_LDLIBS := $(KUBE_TEST_LDLIBS) \
	$(shell $(PKG_CONFIG) --libs libcrypto)
test_kube_tls_with_fake_apiserver_CFLAGS := -I.
# The HTTPS stand-in and the generated certificates, checked against kubectl.
TEST_SCRIPTS += tests/kube/test_fake_apiserver_tls_with_kubectl.sh
