#include <bwplan/bwplan.hpp>
#include <cstdio>
// A separate CMake project that finds the installed bwplan with find_package and counts Llama-3.2-1B.
int main() {
  bwplan::model_spec m; m.hidden = 2048; m.layers = 16; m.heads = 32; m.kv_heads = 8; m.head_dim = 64;
  m.intermediate = 8192; m.vocab = 128256; m.tied_embeddings = true;
  std::printf("%lld\n", static_cast<long long>(bwplan::count_parameters(m).total()));
}
