TEST_PROGS += test_extender_codec
test_extender_codec_SRCS := tests/scheduler/test_extender_codec.c
test_extender_codec_LIBS := scheduler common
test_extender_codec_LDLIBS := $(scheduler_LDLIBS) $(shell $(PKG_CONFIG) --libs cmocka)

TEST_PROGS += test_httpd
test_httpd_SRCS := tests/scheduler/test_httpd.c src/scheduler/httpd.c
test_httpd_LIBS := common
test_httpd_LDLIBS := $(shell $(PKG_CONFIG) --libs libmicrohttpd gnutls jansson libcurl cmocka)
