# The rooms of src/ and their arrows (docs/architecture.md, "Rooms and arrows"):
# no include against an arrow, no circle between rooms, headers or the files
# of a room, no src/ file over 1,000 lines.  Self-tested first.
TEST_SCRIPTS += tests/arch/check_rooms.py
