// cpu_isas_built.h - the cpu backend's instruction sets this build holds, by the names
// dilattn_cpu_isa() gives them, as tests/cpu/meson.build passes them in DILATTN_TEST_CPU_ISAS
// (commas between). -Dcpu_isas leaves some out (docs/building.md), and the choice tests expect
// one left out to be refused, never run.
#pragma once

#include <initializer_list>
#include <string>

inline bool cpu_isa_built(const std::string& name) {
  const std::string built = std::string(",") + DILATTN_TEST_CPU_ISAS + ",";
  return built.find("," + name + ",") != std::string::npos;
}

// The first of `names` this build holds, or "(refused)" when it holds none of them.
inline const char* first_cpu_isa_built(std::initializer_list<const char*> names) {
  for (const char* name : names)
    if (cpu_isa_built(name)) return name;
  return "(refused)";
}
