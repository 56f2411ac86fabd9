// A fixture of check_layering.sh: graph/ including a backend.
#include "backends/backend.h"
