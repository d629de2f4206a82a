# libgpuvisor.so: the CUDA driver / NVML interposer (docs/interposer.md).
# Hidden visibility plus a version script generated from hooks.h: the
# library exports exactly its hooks.  -Bsymbolic keeps its own references
# bound to itself.  It links the shared region and common code statically
# so the process it lands in needs nothing else.
GV_INTERPOSER := $(BUILD)/lib/libgpuvisor.so
interposer_SRCS := $(wildcard src/interposer/*.c)
interposer_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(interposer_SRCS))
$(interposer_OBJS): EXTRA_CFLAGS := -fvisibility=hidden
ALL_OBJS += $(interposer_OBJS)

$(BUILD)/interposer/libgpuvisor.map: src/interposer/libgpuvisor.map.in src/interposer/hooks.h
	@mkdir -p $(@D)
	$(Q)$(CC) -E -P -x c -Isrc $< -o $@

$(GV_INTERPOSER): $(interposer_OBJS) $(BUILD)/lib/libgvshm.a $(BUILD)/lib/libgvcommon.a $(BUILD)/interposer/libgpuvisor.map src/interposer/module.mk
	@mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(ALL_LDFLAGS) -shared -Wl,-soname,libgpuvisor.so -Wl,-Bsymbolic \
		-Wl,--version-script=$(BUILD)/interposer/libgpuvisor.map -Wl,-z,defs \
		-o $@ $(interposer_OBJS) $(BUILD)/lib/libgvshm.a $(BUILD)/lib/libgvcommon.a -ldl -lpthread

EXTRA_ALL += $(GV_INTERPOSER)
