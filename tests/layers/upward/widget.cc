// A fixture for the layer check (tests/CMakeLists.txt, layers.*): a file of a
// low layer that includes a header of the proxy. Never compiled.
#include "proxy/proxy.h"
#include "balance/policy.h"
