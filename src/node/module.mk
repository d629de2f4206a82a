# gpuvisor-node: the kubelet device plugin (see docs/node-agent.md).
#
# The deviceplugin protobuf messages are generated into the build tree from
# proto/deviceplugin/v1beta1/api.proto.  protoc-c cannot compile the service
# blocks (Register would become the C keyword `register`), so they are
# stripped first; the messages are all the C side needs.
NODE_PROTO     := proto/deviceplugin/v1beta1/api.proto
NODE_GEN       := $(BUILD)/gen/node
NODE_PB_C      := $(NODE_GEN)/deviceplugin.pb-c.c
NODE_PB_H      := $(NODE_GEN)/deviceplugin.pb-c.h
# generated headers: every fuzz replay object waits for them (Makefile)
GEN_HEADERS    += $(NODE_PB_H)

$(NODE_GEN)/deviceplugin.proto: $(NODE_PROTO)
	@mkdir -p $(@D)
	$(Q)awk '/^service /{skip=1} !skip{print} skip && /^}/{skip=0}' $< >$@
$(NODE_PB_C) $(NODE_PB_H) &: $(NODE_GEN)/deviceplugin.proto
	@echo "  PROTOC  $<"
	$(Q)cd $(NODE_GEN) && protoc-c --c_out=. deviceplugin.proto

NODE_PKGS := libnghttp2 libprotobuf-c jansson
NODE_CFLAGS := -I$(NODE_GEN) $(shell $(PKG_CONFIG) --cflags $(NODE_PKGS))
NODE_LDLIBS := $(shell $(PKG_CONFIG) --libs $(NODE_PKGS)) -ldl

LIBS += node
node_SRCS := $(filter-out src/node/main.c,$(wildcard src/node/*.c src/node/*/*.c)) $(NODE_PB_C)
node_CFLAGS := $(NODE_CFLAGS)
# Every object of the node library (and its tests) may include the generated header.
$(patsubst %.c,$(BUILD)/obj/%.o,$(node_SRCS)): $(NODE_PB_H)

PROGS += gpuvisor-node
gpuvisor-node_SRCS := src/node/main.c
gpuvisor-node_LIBS := node kube contracts alloc shm common
gpuvisor-node_LDLIBS := $(NODE_LDLIBS) $(kube_LDLIBS)
gpuvisor-node_CFLAGS := $(NODE_CFLAGS)
$(BUILD)/obj/src/node/main.o: $(NODE_PB_H)
