# Kubernetes API client + informer cache (libcurl, jansson, libyaml for
# kubeconfig, libcrypto for its base64 fields).  Consumers link `kube common`
# and $(kube_LDLIBS).
LIBS += kube
kube_SRCS := $(wildcard src/kube/*.c)
kube_LDLIBS := $(shell $(PKG_CONFIG) --libs libcurl jansson yaml-0.1 libcrypto)
