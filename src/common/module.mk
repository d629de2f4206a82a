# Shared code used by every component: errors, logging, file helpers.
LIBS += common
common_SRCS := $(wildcard src/common/*.c)
common_CFLAGS := -Wconversion
