# Mutants (docs/contributing.md, "Mutants"): each tests/mutants/<name>.patch
# plants a bug a test was written to catch; `make mutants` applies them one
# at a time to a scratch copy (build-mutants/) and fails if any survives.
# MUTANTS_SUBSET=k/n or day/n runs a rotating share; MUTANTS="a b" names some.
.PHONY: mutants
mutants:
	$(Q)tests/mutants/run.sh $(MUTANTS)

# The runner itself, on a stand-in repository (seconds).
TEST_SCRIPTS += tests/mutants/test_mutants_runner.sh tests/mutants/test_sweep.sh
