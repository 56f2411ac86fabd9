#include <map>

#include "tools/commands.h"

namespace omt::tools {

namespace {
std::map<CLI::App*, std::function<int()>>& actions() {
  static std::map<CLI::App*, std::function<int()>> a;
  return a;
}
}  // namespace

void set_action(CLI::App* sub, std::function<int()> action) { actions()[sub] = std::move(action); }

int run_selected(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands())
    if (auto it = actions().find(sub); it != actions().end()) return it->second();
  return 1;
}

}  // namespace omt::tools
