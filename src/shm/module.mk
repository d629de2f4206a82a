# Shared region (per-container accounting file): used by libgpuvisor.so and
# the CLI (`gpuvisor run`, `gpuvisor ps`).
LIBS += shm
shm_SRCS := $(wildcard src/shm/*.c)
