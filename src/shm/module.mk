# Shared region (per-container accounting file): used by libgpuvisor.so, the
# CLI (`gpuvisor ps`) and the node agent's monitor.
LIBS += shm
shm_SRCS := $(wildcard src/shm/*.c)
