# gpuvisor simulate: trace readers, synthetic generator, replay protocol,
# reports (docs/simulate.md).
LIBS += sim
sim_SRCS := $(wildcard src/sim/*.c)
