# Allocation engine: pure C, no I/O, no globals (docs/alloc.md).
LIBS += alloc
alloc_SRCS := $(wildcard src/alloc/*.c)
alloc_CFLAGS := -Wconversion
