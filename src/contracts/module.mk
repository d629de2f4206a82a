# Codecs for the Kubernetes objects and annotations components exchange
# (pod requests, node GPU inventory, ...).  Shared by the scheduler, the
# node agent, the webhook and the simulator; never copied into them.
# Consumers link `contracts` and $(contracts_LDLIBS).
contracts_SRCS := $(wildcard src/contracts/*.c)
contracts_LDLIBS := $(shell $(PKG_CONFIG) --libs jansson) -lmbedcrypto
ifneq ($(contracts_SRCS),)
LIBS += contracts
endif
