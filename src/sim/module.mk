# gpuvisor simulate: trace readers, synthetic generator, replay protocol,
# reports (docs/simulate.md).
LIBS += sim
sim_SRCS := $(wildcard src/sim/*.c)
# The LP bound of the offline reference (lpbound.c) solves with GLPK
# (Debian libglpk-dev / libglpk40); consumers of the sim library link it.
sim_LDLIBS := -lglpk
