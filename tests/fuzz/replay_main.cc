// Runs a libFuzzer target's LLVMFuzzerTestOneInput once on every file of the folders given,
// so the committed corpus (seeds and every input that once crashed) is a regression test in
// builds without libFuzzer: the GCC release build and the ASan/UBSan build.
#include <dirent.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  int files = 0;
  for (int a = 1; a < argc; ++a) {
    std::vector<std::string> paths;
    if (DIR* d = opendir(argv[a])) {
      while (const dirent* e = readdir(d))
        if (e->d_name[0] != '.') paths.push_back(std::string(argv[a]) + "/" + e->d_name);
      closedir(d);
    } else {
      paths.push_back(argv[a]);
    }
    for (const auto& p : paths) {
      std::ifstream in(p, std::ios::binary);
      if (!in) {
        std::fprintf(stderr, "cannot read %s\n", p.c_str());
        return 1;
      }
      std::ostringstream os;
      os << in.rdbuf();
      const std::string bytes = os.str();
      std::fprintf(stderr, "%s (%zu bytes)\n", p.c_str(), bytes.size());
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++files;
    }
  }
  std::fprintf(stderr, "%d inputs ran cleanly\n", files);
  return files > 0 ? 0 : 1;
}
