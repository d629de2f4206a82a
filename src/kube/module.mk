# Kubernetes API client + informer cache: our HTTP/1.1 transport over
# mbedTLS (docs/kube-client.md says why not libcurl), jansson, libyaml for
# kubeconfig.  Consumers link `kube common` and $(kube_LDLIBS).  Debian's
# mbedTLS 2.28 ships no pkg-config file, hence the plain -l flags.
LIBS += kube
kube_SRCS := $(wildcard src/kube/*.c)
MBEDTLS_LDLIBS := -lmbedtls -lmbedx509 -lmbedcrypto
kube_LDLIBS := $(shell $(PKG_CONFIG) --libs jansson yaml-0.1) $(MBEDTLS_LDLIBS) -lpthread
