// dlopen_test.cpp - libcapstan.so can be loaded with dlopen(): it asks for
// no static TLS (Note [TLS across a switch] in rts/task/task.hpp), and
// loading it runs nothing that fails.
#include <dlfcn.h>
#include <elf.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

const char* shared_library() { return std::getenv("CAPSTAN_SHARED_LIB"); }

// The DT_FLAGS entry of an ELF64 shared object's dynamic section, or 0.
std::uint64_t dt_flags(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < sizeof(Elf64_Ehdr)) return 0;
  auto* eh = reinterpret_cast<const Elf64_Ehdr*>(bytes.data());
  for (unsigned i = 0; i < eh->e_phnum; ++i) {
    auto* ph = reinterpret_cast<const Elf64_Phdr*>(bytes.data() + eh->e_phoff + i * eh->e_phentsize);
    if (ph->p_type != PT_DYNAMIC) continue;
    for (auto* d = reinterpret_cast<const Elf64_Dyn*>(bytes.data() + ph->p_offset);
         d->d_tag != DT_NULL; ++d)
      if (d->d_tag == DT_FLAGS) return d->d_un.d_val;
  }
  return 0;
}

TEST(SharedLibrary, NeedsNoStaticTls) {
  if (!shared_library()) GTEST_SKIP() << "CAPSTAN_SHARED_LIB not set";
  EXPECT_EQ(dt_flags(shared_library()) & DF_STATIC_TLS, 0u)
      << shared_library() << " uses initial-exec TLS: dlopen() may fail once static TLS is used up";
}

TEST(SharedLibrary, CanBeDlopened) {
  if (!shared_library()) GTEST_SKIP() << "CAPSTAN_SHARED_LIB not set";
  void* h = dlopen(shared_library(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  EXPECT_NE(dlsym(h, "_ZN7capstan6detail18current_spark_poolEv"), nullptr) << dlerror();
  dlclose(h);
}

}  // namespace
