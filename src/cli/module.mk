# The gpuvisor CLI.  Component libraries it links are listed in link order
# (dependents before dependencies); add yours when your command lands.
PROGS += gpuvisor
gpuvisor_SRCS := $(wildcard src/cli/*.c)
gpuvisor_LIBS := sim contracts alloc shm common
gpuvisor_LDLIBS = $(contracts_LDLIBS) $(sim_LDLIBS)
