// The caching-allocator replay (include/bwplan/allocator.hpp) against hand-derived cases of PyTorch's
// CUDACachingAllocator rules (/work/shared/reference/allocator.md §8).
#include <bwplan/memory.hpp>

#include <catch2/catch.hpp>

using namespace bwplan::alloc;

TEST_CASE("allocator: size classes and segment sizes", "[allocator]") {
  CHECK(round_size(1) == 512);
  CHECK(round_size(513) == 1024);
  CHECK(segment_size(4096) == 2 * MiB);            // small pool
  CHECK(segment_size(3 * MiB / 2) == 20 * MiB);    // 1 MiB < size < 10 MiB
  CHECK(segment_size(30 * MiB) == 30 * MiB);       // rounded to 2 MiB
  CHECK(segment_size(31 * MiB) == 32 * MiB);
  caching_allocator a;
  a.malloc(3 * MiB / 2);
  CHECK(a.reserved() == 20 * MiB);  // a 1.5 MiB request reserves a 20 MiB segment
  a.malloc(30 * MiB);
  CHECK(a.reserved() == 50 * MiB);  // a 30 MiB request reserves 30 MiB
  caching_allocator b;
  for (int i = 0; i < 7; ++i) b.malloc(3 * MiB);  // six split one 20 MiB segment, the seventh needs another
  CHECK(b.reserved() == 40 * MiB);
  CHECK(b.allocated() == 21 * MiB);
  caching_allocator c;
  c.malloc(39 * MiB / 2);  // 19.5 MiB: remainder 0.5 MiB ≤ 1 MiB, not split: the whole block counts
  CHECK(c.allocated() == 20 * MiB);
  caching_allocator d;
  for (int i = 0; i < 1000; ++i) d.malloc(4096);
  CHECK(d.reserved() == 4 * MiB);
}

TEST_CASE("allocator: reuse within a pool and stream only", "[allocator]") {
  caching_allocator a;
  const int x = a.malloc(30 * MiB, 0);
  a.free(x);
  const int y = a.malloc(25 * MiB, 0);  // same stream: a smaller request reuses the freed 30 MiB segment
  CHECK(a.reserved() == 30 * MiB);
  a.free(y);
  a.malloc(25 * MiB, 1);  // another stream cannot use it: a new segment, 25 MiB rounded to 26
  CHECK(a.reserved() == 56 * MiB);
  caching_allocator b;  // worked example of allocator.md §8 part 1
  const int l = b.malloc(512 * MiB);
  b.free(l);
  const int f = b.malloc(1024 * MiB);
  CHECK(b.reserved() == 1536 * MiB);
  b.free(f);
  for (int i = 0; i < 30; ++i) b.malloc(20 * MiB);
  b.malloc(1024 * MiB);
  CHECK(b.reserved() == 2560 * MiB);
  CHECK(b.peak_reserved() == 2560 * MiB);
}

TEST_CASE("allocator: expandable segments and the out-of-memory path", "[allocator]") {
  allocator_settings s;
  s.expandable_segments = true;
  caching_allocator a(s);  // allocator.md §8 part 2: 1640 MiB instead of 2560
  const int l = a.malloc(512 * MiB);
  CHECK(a.reserved() == 520 * MiB);
  a.free(l);
  const int f = a.malloc(1024 * MiB);
  CHECK(a.reserved() == 1040 * MiB);
  a.free(f);
  for (int i = 0; i < 30; ++i) a.malloc(20 * MiB);
  a.malloc(1024 * MiB);
  CHECK(a.reserved() == 1640 * MiB);
  allocator_settings t;
  t.budget = 1024 * MiB;
  caching_allocator b(t);
  const int x = b.malloc(512 * MiB);
  b.free(x);
  b.malloc(1000 * MiB);  // fails, releases the free 512 MiB segment, retries: fits
  CHECK_FALSE(b.oom());
  CHECK(b.reserved() == 1000 * MiB);
  b.malloc(100 * MiB);
  CHECK(b.oom());
}

TEST_CASE("allocator: the step replay reproduces a measured H200 run", "[allocator]") {
  // llama3.2-1b, amp (fp32 weights, autocast bf16), micro-batch 1 × 2048, no checkpointing, fused AdamW:
  // measured peak allocated 22.586 GiB, peak reserved 23.459 GiB (h200-calibration.jsonl, first row)
  step_shape m;
  m.hidden = 2048; m.layers = 16; m.heads = 32; m.kv_heads = 8; m.head_dim = 64; m.intermediate = 8192;
  m.vocab = 128256; m.micro_batch = 1; m.seq = 2048; m.tied = true; m.workspace = 69'206'016;
  m.checkpointed.assign(16, false);
  caching_allocator a;
  const replay_result r = replay_step_trace(m, a);
  const double gib = 1073741824.0;
  CHECK(std::abs(r.peak_allocated / gib / 22.586 - 1) < 0.005);
  CHECK(std::abs(r.peak_reserved / gib / 23.459 - 1) < 0.01);
  CHECK_FALSE(r.oom);
}
