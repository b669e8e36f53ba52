# Conveniences over the scripts (the build itself is CMake + Ninja: see README).
#   make test              ./test.sh
#   make fuzz SECONDS=600  every libFuzzer target for SECONDS each (scripts/fuzz.sh)
SECONDS ?= 60

.PHONY: test fuzz
test:
	./test.sh
fuzz:
	scripts/fuzz.sh $(SECONDS)
