# kubectl-gpuvisor: the `kubectl gpuvisor` plugin (inspect, top).  Reuses the
# kube client, the contracts codecs and the allocation engine; libyaml (via
# the kube client) writes -o yaml.
PROGS += kubectl-gpuvisor
kubectl-gpuvisor_SRCS := $(wildcard src/kubectl/*.c)
kubectl-gpuvisor_LIBS := kube contracts alloc common
kubectl-gpuvisor_LDLIBS = $(kube_LDLIBS) $(contracts_LDLIBS)
