// bwplan: GPU memory and throughput planning for LLM training
// SPDX-License-Identifier: Apache-2.0
#pragma once

// A replay of PyTorch's CUDA caching allocator (the native backend) over one training run's allocation and free
// sequence, and the sequence itself for the eager stack bwplan models (`replay_step_trace`). Standard library
// only. @sa docs/methodology.md#allocator, /work/shared/reference/allocator.md
//
// Source: pytorch/pytorch `c10/cuda/CUDACachingAllocator.cpp` @ 001074d25084fdb87a799823e395a50f5ec044d3 (cited
// below as "A:line") and `c10/cuda/CUDAAllocatorConfig.cpp` (defaults, "C:line").

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <utility>
#include <vector>

namespace bwplan::alloc {

inline constexpr std::uint64_t MiB = std::uint64_t{1} << 20;
inline constexpr std::uint64_t kMinBlockSize = 512;       ///< A:118-119: every request rounds up to 512 B
inline constexpr std::uint64_t kSmallSize = 1 * MiB;      ///< A:120: largest request of the small pool
inline constexpr std::uint64_t kSmallBuffer = 2 * MiB;    ///< A:121-122: small-pool segment
inline constexpr std::uint64_t kMinLargeAlloc = 10 * MiB; ///< A:123-124: below, large requests share 20 MiB segments
inline constexpr std::uint64_t kRoundLarge = 2 * MiB;     ///< A:125: larger segments round to 2 MiB
inline constexpr std::uint64_t kLargeBuffer = 20 * MiB;   ///< A:48-49: shared large segment; expandable page

/// `PYTORCH_CUDA_ALLOC_CONF` settings the replay honours, and the device bytes the allocator may reserve.
struct allocator_settings {
  bool expandable_segments = false;  ///< `expandable_segments:True` (C:16, default false)
  /// `max_split_size_mb` in bytes (C:14, default unlimited): larger blocks are never split and a request below it
  /// never takes one (A:2544-2547); a request above it takes a block at most kLargeBuffer larger (A:2548-2551).
  std::uint64_t max_split_size = std::numeric_limits<std::uint64_t>::max();
  /// Bytes cudaMalloc can still hand out (device capacity less the CUDA context, NCCL and other processes).
  std::uint64_t budget = std::numeric_limits<std::uint64_t>::max();
};
// garbage_collection_threshold acts only with a per-process memory fraction set (A:1237-1241), which the
// trainer does not set, so it changes nothing here.

/// Request rounding (`round_size`, A:2026-2037, roundup_power2_divisions off): at least 512 B, a multiple of 512.
[[nodiscard]] constexpr std::uint64_t round_size(std::uint64_t n) noexcept {
  return n < kMinBlockSize ? kMinBlockSize : (n + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

/// Segment requested from cudaMalloc when no cached block fits (`get_allocation_size`, A:2488-2496): 2 MiB for
/// the small pool (≤ 1 MiB), 20 MiB for requests below 10 MiB, else the request rounded up to 2 MiB.
[[nodiscard]] constexpr std::uint64_t segment_size(std::uint64_t size) noexcept {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

/// One device's caching allocator: segments split into blocks, per-(pool, stream) free sets searched best fit.
///
/// malloc: round (A:1221); pool by size (A:2463-2467); `lower_bound` on (stream, size, address) in that pool:
/// the smallest free block of the same stream that fits, lowest address first; no other stream's block is
/// ever used (A:2498-2509). Without one, a new segment (A:1247, A:2630-2707); when it would exceed the budget,
/// every free block that is a whole segment is released on every stream and the request retried once
/// (`release_cached_blocks`, A:1253-1255, A:2772-2797, A:2916-2933); if it still does not fit, out of memory.
/// A found block is split when the remainder is ≥ 512 B in the small pool or with expandable segments, and
/// when the request is below max_split_size and the remainder > 1 MiB in the large pool (`should_split`,
/// A:2478-2486); the request takes the low-address part (A:1400-1416); unsplit, the whole block counts as
/// allocated (A:1458). free: merge with free neighbours of the same segment, back into the pool and stream it
/// came from (A:2331-2443); segments never merge. Expandable segments (simplified): one segment per stream in
/// the large pool whose free tail grows by whole 20 MiB pages (A:2178-2328); an out of memory unmaps the whole free pages
/// (unmap_free_pages). `record_stream`
/// events are not modelled (the traces here hold tensors by reference, as FSDP2 does).
class caching_allocator {
 public:
  explicit caching_allocator(allocator_settings s = {}) : s_(s) {}

  /// Allocates `bytes` on `stream`; returns a handle for free(). Sets oom() (the first failing request is kept)
  /// and still hands out the block so that the replay can go on.
  int malloc(std::uint64_t bytes, int stream = 0) {
    const std::uint64_t size = round_size(bytes);
    const bool small = size <= kSmallSize;
    auto& fs = pool(small, stream);
    int b = -1;
    auto [fb, fi] = fs.find(key{size, 0, -1});
    bool found = fb < fs.bins.size();
    if (found) {  // oversize rules, only with max_split_size set (A:2544-2551)
      const std::uint64_t bs = fs.bins[fb][fi].size;
      if ((size < s_.max_split_size && bs >= s_.max_split_size) ||
          (size >= s_.max_split_size && bs >= size + kLargeBuffer))
        found = false;
    }
    if (found) {
      b = fs.bins[fb][fi].block;
      fs.erase_at(fb, fi);
      leave_pool(b);
      remap(b, size);  // the pages under the request; a split hands the rest of the unmapped pages to the remainder
    } else if (s_.expandable_segments && !small) {
      b = expand(size, stream);
    } else {
      const std::uint64_t a = segment_size(size);
      if (reserved_ + a > s_.budget) {
        // release_cached_blocks frees the whole free segments and, with expandable segments, unmaps the free pages of
        // the large pools too (A:2850-2915): a small-pool segment at the line gets the pages the large pool holds free
        release_cached();
        unmap_free_pages();
        if (reserved_ + a > s_.budget && !oom_) { oom_ = true; oom_request_ = size; }
      }
      b = new_block(next_addr_, a, stream, small);
      next_addr_ += a;
      reserved_ += a;
      peak_reserved_ = std::max(peak_reserved_, reserved_);
    }
    block& k = blocks_[static_cast<std::size_t>(b)];
    const std::uint64_t rem = k.size - size;
    const bool split = (small || s_.expandable_segments) ? rem >= kMinBlockSize
                                                         : (size < s_.max_split_size && rem > kSmallSize);
    if (split) {
      const int r = new_block(k.addr + size, rem, stream, small);
      block& kk = blocks_[static_cast<std::size_t>(b)];
      block& rr = blocks_[static_cast<std::size_t>(r)];
      rr.prev = b;
      rr.next = kk.next;
      if (kk.next >= 0) blocks_[static_cast<std::size_t>(kk.next)].prev = r;
      kk.next = r;
      kk.size = size;
      rr.unmapped = kk.unmapped;  // expandable segments: the pages remap left unmapped lie past the request
      kk.unmapped = 0;
      if (s_.expandable_segments && !small && rr.next < 0) tails_[stream] = r;
      insert(r);
    }
    if (!split) remap(b);  // handed out whole: every page of it mapped
    block& kb = blocks_[static_cast<std::size_t>(b)];
    kb.allocated = true;
    kb.requested = size;
    requested_ += size;
    allocated_ += kb.size;
    peak_allocated_ = std::max(peak_allocated_, allocated_);
    return b;
  }

  /// Frees handle `h` (no-op for -1).
  void free(int h) {
    if (h < 0) return;
    block& b = blocks_[static_cast<std::size_t>(h)];
    b.allocated = false;
    allocated_ -= b.size;
    requested_ -= b.requested;
    for (const int nb : {b.prev, b.next}) {
      if (nb < 0) continue;
      block& n = blocks_[static_cast<std::size_t>(nb)];
      if (n.allocated) continue;
      pool_erase(pool(n.small, n.stream), {n.size, n.addr, nb});
      leave_pool(nb);
      block& me = blocks_[static_cast<std::size_t>(h)];
      if (nb == me.prev) {
        me.addr = n.addr;
        me.prev = n.prev;
        if (n.prev >= 0) blocks_[static_cast<std::size_t>(n.prev)].next = h;
      } else {
        me.next = n.next;
        if (n.next >= 0) blocks_[static_cast<std::size_t>(n.next)].prev = h;
      }
      me.size += n.size;
      me.unmapped += n.unmapped;
      retire(nb);
    }
    if (s_.expandable_segments && !b.small && blocks_[static_cast<std::size_t>(h)].next < 0) tails_[b.stream] = h;
    insert(h);
  }

  [[nodiscard]] std::uint64_t allocated() const noexcept { return allocated_; }
  /// Bytes of the live requests, each rounded (round_size): what the requests alone hold, whatever blocks they got
  /// (allocated() counts a block left unsplit whole), so the same for a sequence of requests under any setting; at
  /// most allocated(), which is at most reserved().
  [[nodiscard]] std::uint64_t requested() const noexcept { return requested_; }
  [[nodiscard]] std::uint64_t reserved() const noexcept { return reserved_; }
  [[nodiscard]] std::uint64_t peak_allocated() const noexcept { return peak_allocated_; }
  [[nodiscard]] std::uint64_t peak_reserved() const noexcept { return peak_reserved_; }
  /// Resets the allocated peak to the current value (`torch.cuda.reset_peak_memory_stats`).
  void reset_peak_allocated() noexcept { peak_allocated_ = allocated_; }
  /// The allocator's state as the next requests see it: every live block (address, size, stream, pool, allocated,
  /// first of its segment, unmapped bytes, expandable tail) in address order, and the counters. Two equal states
  /// answer the same sequence of requests the same way; handles, which differ, play no part in any decision.
  [[nodiscard]] std::vector<std::uint64_t> state() const {
    std::vector<std::pair<std::uint64_t, std::size_t>> live;
    for (std::size_t h = 0; h < blocks_.size(); ++h)
      if (!blocks_[h].dead) live.emplace_back(blocks_[h].addr, h);
    std::sort(live.begin(), live.end());
    std::set<int> tails;
    for (const auto& [stream, t] : tails_) tails.insert(t);
    std::vector<std::uint64_t> out{next_addr_, allocated_, reserved_, oom_ ? 1u : 0u};
    out.reserve(out.size() + 4 * live.size());
    for (const auto& [addr, h] : live) {
      const block& b = blocks_[h];
      out.push_back(addr);
      out.push_back(b.size);
      out.push_back(b.unmapped);
      out.push_back(static_cast<std::uint64_t>(b.stream) << 4 | (b.small ? 1u : 0u) | (b.allocated ? 2u : 0u) |
                    (b.prev < 0 ? 4u : 0u) | (tails.count(static_cast<int>(h)) ? 8u : 0u));
    }
    return out;
  }
  /// Whether a request failed even after releasing the cache (CUDA out of memory).
  [[nodiscard]] bool oom() const noexcept { return oom_; }
  /// Rounded size of the first request that failed, bytes.
  [[nodiscard]] std::uint64_t oom_request() const noexcept { return oom_request_; }

 private:
  struct block {
    std::uint64_t addr = 0, size = 0;
    int stream = 0, prev = -1, next = -1;
    bool small = false, allocated = false;
    std::uint64_t requested = 0;  ///< allocated: the rounded request it was handed out for (allocated_ counts size)
    std::uint64_t unmapped = 0;  ///< expandable segments: bytes of whole pages of this free block unmapped after an out of memory
    bool dead = false;           ///< merged into a neighbour or released: the slot waits in dead_ for reuse
    bool whole = false;          ///< in the pools as a whole segment (what release_cached frees)
    bool unmap = false;          ///< expandable segments: in the large pools, not yet seen by unmap_free_pages
    bool whole_listed = false, unmap_listed = false;  ///< in whole_free_ / unmap_pending_ (lists may hold stale handles)
  };
  // a free block in its pool: ordered by size, then address (unique within a pool: free blocks do not overlap)
  struct key {
    std::uint64_t size, addr;
    int block;
    friend bool operator<(const key& a, const key& b) noexcept {
      return a.size < b.size || (a.size == b.size && a.addr < b.addr);
    }
  };
  // a pool: its free blocks in ascending (size, address), the order std::set kept (best fit: the first at or above a
  // request), cut into 64 bins of size ranges (two per power of two from 512 B), each a sorted vector, with a mask of the
  // bins that hold a block: a request searches its own bin, else takes the first block of the next bin that holds one.
  // The bins' ranges do not overlap, so the concatenation is the one sorted order and every decision is std::set's.
  // (Sorted vectors shift less than a tree allocates per node; short ones shift and search less: docs/performance.md.)
  struct free_list {
    std::array<std::vector<key>, 64> bins;
    std::uint64_t used = 0;  ///< bit b: bins[b] holds a block
    static std::size_t bin(std::uint64_t size) noexcept {
      if (size < 1024) return 0;
      const auto lg = static_cast<unsigned>(std::bit_width(size)) - 1;  // >= 10
      const std::size_t b = static_cast<std::size_t>(lg - 9) * 2 + ((size >> (lg - 1)) & 1) - 1;
      return b < 63 ? b : 63;
    }
    // the first block at or above (size, addr) in the order; bins.size() when none
    std::pair<std::size_t, std::size_t> find(const key& k) const noexcept {
      const std::size_t b = bin(k.size);
      const auto& v = bins[b];
      const auto it = std::lower_bound(v.begin(), v.end(), k);
      if (it != v.end()) return {b, static_cast<std::size_t>(it - v.begin())};
      const std::uint64_t above = b >= 63 ? 0 : used & (~std::uint64_t{0} << (b + 1));
      if (above == 0) return {bins.size(), 0};
      return {static_cast<std::size_t>(std::countr_zero(above)), 0};
    }
    void erase_at(std::size_t b, std::size_t i) {
      auto& v = bins[b];
      v.erase(v.begin() + static_cast<std::ptrdiff_t>(i));
      if (v.empty()) used &= ~(std::uint64_t{1} << b);
    }
  };
  static void pool_insert(free_list& p, const key& k) {
    const std::size_t b = free_list::bin(k.size);
    auto& v = p.bins[b];
    v.insert(std::lower_bound(v.begin(), v.end(), k), k);
    p.used |= std::uint64_t{1} << b;
  }
  static void pool_erase(free_list& p, const key& k) {
    const std::size_t b = free_list::bin(k.size);
    auto& v = p.bins[b];
    const auto it = std::lower_bound(v.begin(), v.end(), k);
    if (it != v.end() && it->size == k.size && it->addr == k.addr) p.erase_at(b, static_cast<std::size_t>(it - v.begin()));
  }
  free_list& pool(bool small, int stream) {
    const std::size_t i = static_cast<std::size_t>(stream) * 2 + (small ? 1 : 0);
    if (i >= pools_.size()) pools_.resize(i + 1);
    return pools_[i];
  }
  // a block record, reusing the slot of one merged into a neighbour or released (handles are not kept past free())
  int new_block(std::uint64_t addr, std::uint64_t size, int stream, bool small) {
    const block b{addr, size, stream, -1, -1, small, false};
    if (!dead_.empty()) {
      const int h = dead_.back();
      dead_.pop_back();
      blocks_[static_cast<std::size_t>(h)] = b;
      return h;
    }
    blocks_.push_back(b);
    return static_cast<int>(blocks_.size() - 1);
  }
  void retire(int h) {
    blocks_[static_cast<std::size_t>(h)].dead = true;
    dead_.push_back(h);
  }
  void insert(int h) {
    block& b = blocks_[static_cast<std::size_t>(h)];
    pool_insert(pool(b.small, b.stream), {b.size, b.addr, h});
    if (b.prev < 0 && b.next < 0 && !(s_.expandable_segments && !b.small)) {
      b.whole = true;
      if (!b.whole_listed) { b.whole_listed = true; whole_free_.push_back(h); compact(whole_free_, &block::whole, &block::whole_listed); }
    }
    if (s_.expandable_segments && !b.small) {
      b.unmap = true;
      if (!b.unmap_listed) { b.unmap_listed = true; unmap_pending_.push_back(h); compact(unmap_pending_, &block::unmap, &block::unmap_listed); }
    }
  }
  // drops the stale handles of a list once they are most of it (each listed block once, in list order)
  void compact(std::vector<int>& list, bool block::*flag, bool block::*listed) {
    if (list.size() < 2 * blocks_.size() + 64) return;
    for (const int h : list) blocks_[static_cast<std::size_t>(h)].*listed = false;
    std::vector<int> keep;
    for (const int h : list) {
      block& b = blocks_[static_cast<std::size_t>(h)];
      if (b.*flag && !(b.*listed)) { b.*listed = true; keep.push_back(h); }
    }
    list = std::move(keep);
  }
  // a block leaves the pools (handed out, merged into a neighbour, grown as a segment's tail); its handle may stay in
  // the lists, which skip it by its flags
  void leave_pool(int h) {
    block& b = blocks_[static_cast<std::size_t>(h)];
    b.whole = false;
    b.unmap = false;
  }
  // release_cached_blocks: cudaFree every free block with no neighbour (a whole segment), every stream. Those
  // blocks are listed in whole_free_ as they enter the pools, so that a replay past the budget, which releases before
  // every new segment, does not walk every free block each time (quadratic in the blocks of a deep model).
  void release_cached() {
    for (const int h : whole_free_) {
      block& b = blocks_[static_cast<std::size_t>(h)];
      b.whole_listed = false;
      if (!b.whole) continue;  // left the pools since, or its slot now holds another block
      b.whole = false;
      reserved_ -= b.size;
      pool_erase(pool(b.small, b.stream), {b.size, b.addr, h});
      retire(h);
    }
    whole_free_.clear();
  }
  // expandable segments: a free block handed out again has the unmapped pages under its first `need` bytes mapped
  // again (A:2297-2328: map_block maps the requested size and leaves the rest an unmapped block); over the budget, the
  // pages of other free blocks are unmapped first, as on an out of memory. Mapping every unmapped page of a large free
  // block for a small request read 47 GiB of pages for one request and an out of memory where PyTorch maps a few.
  void remap(int h, std::uint64_t need = std::numeric_limits<std::uint64_t>::max()) {
    block& b = blocks_[static_cast<std::size_t>(h)];
    if (b.unmapped == 0) return;
    std::uint64_t m = b.unmapped;
    if (need < b.size) {  // the pages [addr, addr + need) touches
      const std::uint64_t pages = ((b.addr + need - 1) / kLargeBuffer - b.addr / kLargeBuffer + 1) * kLargeBuffer;
      m = std::min(m, pages);
    }
    b.unmapped -= m;
    if (reserved_ + m > s_.budget) {
      release_cached();
      unmap_free_pages();
      // the block being handed out has left the pools, but its whole pages past the request are free too: PyTorch keeps
      // them a block of their own in the pool, which release_cached_blocks unmaps
      if (need < b.size) {
        const std::uint64_t lo = (b.addr + kLargeBuffer - 1) / kLargeBuffer, hi = (b.addr + b.size) / kLargeBuffer;
        const std::uint64_t from = std::max(lo, (b.addr + need + kLargeBuffer - 1) / kLargeBuffer);
        const std::uint64_t beyond = hi > from ? (hi - from) * kLargeBuffer : 0;
        if (beyond > b.unmapped) {
          reserved_ -= beyond - b.unmapped;
          b.unmapped = beyond;
        }
      }
      if (reserved_ + m > s_.budget && !oom_) { oom_ = true; oom_request_ = m; }
    }
    reserved_ += m;
    peak_reserved_ = std::max(peak_reserved_, reserved_);
  }
  // release_cached_blocks on expandable segments: unmap the whole pages of every free block of the large pools,
  // [ceil(ptr), floor(ptr + size)) in pages of the segment (A:454-461, A:2850-2915)
  // Only the large free blocks that entered the pools since the last pass (unmap_pending_) can have pages left to
  // unmap: a block's address and size do not change while it is in a pool, so one pass settles it.
  void unmap_free_pages() {
    if (!s_.expandable_segments) return;
    for (const int h : unmap_pending_) {
      block& b = blocks_[static_cast<std::size_t>(h)];
      b.unmap_listed = false;
      if (!b.unmap) continue;
      b.unmap = false;
      const std::uint64_t lo = (b.addr + kLargeBuffer - 1) / kLargeBuffer, hi = (b.addr + b.size) / kLargeBuffer;
      const std::uint64_t pages = hi > lo ? (hi - lo) * kLargeBuffer : 0;
      if (pages > b.unmapped) {
        reserved_ -= pages - b.unmapped;
        b.unmapped = pages;
      }
    }
    unmap_pending_.clear();
  }
  // expandable segment of `stream`: map whole pages after its free tail (A:2297-2328)
  int expand(std::uint64_t size, int stream) {
    auto [it, fresh] = tails_.try_emplace(stream, -1);
    int tail = it->second;
    const bool free_tail = tail >= 0 && !blocks_[static_cast<std::size_t>(tail)].allocated;
    const std::uint64_t have = free_tail ? blocks_[static_cast<std::size_t>(tail)].size : 0;
    // a free tail that already holds the request (one the max_split_size rule kept malloc from taking) maps no page
    // (`find_expandable_block` finds the address space mapped)
    const std::uint64_t add = have >= size ? 0 : (size - have + kLargeBuffer - 1) / kLargeBuffer * kLargeBuffer;
    const std::uint64_t remapped = free_tail ? blocks_[static_cast<std::size_t>(tail)].unmapped : 0;
    if (free_tail) blocks_[static_cast<std::size_t>(tail)].unmapped = 0;
    if (reserved_ + add + remapped > s_.budget) {
      release_cached();
      unmap_free_pages();
      if (free_tail) {  // the tail itself may have been unmapped just now: it is mapped again with the new pages
        block& t = blocks_[static_cast<std::size_t>(tail)];
        reserved_ += t.unmapped;
        t.unmapped = 0;
      }
      if (reserved_ + add + remapped > s_.budget && !oom_) { oom_ = true; oom_request_ = size; }
    }
    reserved_ += add + remapped;
    peak_reserved_ = std::max(peak_reserved_, reserved_);
    int b;
    if (free_tail) {
      block& t = blocks_[static_cast<std::size_t>(tail)];
      pool_erase(pool(false, stream), {t.size, t.addr, tail});
      leave_pool(tail);
      t.size += add;
      b = tail;
    } else {
      std::uint64_t addr = next_addr_;
      if (tail >= 0) {
        const block& t = blocks_[static_cast<std::size_t>(tail)];
        addr = t.addr + t.size;
      } else {  // a fresh virtual range, page-aligned
        addr = (next_addr_ + kLargeBuffer - 1) / kLargeBuffer * kLargeBuffer;
        next_addr_ = addr + (std::uint64_t{1} << 50) / kLargeBuffer * kLargeBuffer;
      }
      b = new_block(addr, add, stream, false);
      blocks_[static_cast<std::size_t>(b)].prev = tail;
      if (tail >= 0) blocks_[static_cast<std::size_t>(tail)].next = b;
    }
    it->second = b;
    return b;
  }

  allocator_settings s_;
  std::vector<block> blocks_;
  std::vector<int> dead_;  ///< slots of blocks_ free for reuse
  std::vector<free_list> pools_;  ///< per stream and pool: stream · 2 + small
  std::map<int, int> tails_;
  std::vector<int> whole_free_;     ///< free blocks that are a whole segment (block::whole), and stale handles
  std::vector<int> unmap_pending_;  ///< expandable segments: large free blocks not yet unmapped (block::unmap), and stale handles
  std::uint64_t next_addr_ = 0, allocated_ = 0, requested_ = 0, reserved_ = 0, peak_allocated_ = 0, peak_reserved_ = 0;
  std::uint64_t oom_request_ = 0;
  bool oom_ = false;
};


/// What the step trace needs of one training run on one GPU, or of one rank of FSDP2 full sharding over `shards`
/// data-parallel ranks (all sizes in elements or tokens).
struct step_shape {
  std::int64_t hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0, vocab = 0;
  std::int64_t micro_batch = 1, seq = 0;
  bool tied = false;      ///< LM head shares the embedding
  bool qkv_bias = false;  ///< Q/K/V projections carry a bias
  bool amp = true;        ///< fp32 weights, gradients and optimizer states under torch.autocast(bf16); else all bf16
  bool fsdp2 = false;     ///< FSDP2 `fully_shard` per block and root, MixedPrecisionPolicy(param bf16, reduce fp32):
                          ///< fp32 sharded weights, gradients and states, bf16 compute (amp ignored)
  std::int64_t shards = 1;  ///< FSDP2: ranks each parameter is sharded over (dim 0, padded to a multiple of it)
  /// FSDP2 `reshard_after_forward` of the blocks: true for full and hybrid sharding; false for SHARD_GRAD_OP (the
  /// reference trainer's sharding grad-op, apps/train/bwtrain/parallel.py `apply_fsdp`): a block's unsharded parameters
  /// stay from its forward to its post-backward reshard, and its pre-backward unshard and the backward prefetch find it
  /// unsharded and gather nothing (`FSDPParamGroup.unshard`: "if self.is_unsharded: return"), so backward runs no
  /// all-gather (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py `post_forward`, `unshard`)
  bool reshard_after_forward = true;
  /// DistributedDataParallel over more than one rank (the reference trainer's sharding none with gpus > 1,
  /// apps/train/bwtrain/parallel.py `apply_ddp`: default buckets, `gradient_as_bucket_view=False`): built on the meta
  /// device (meta_init), then DDP's construction broadcasts the parameters from rank 0 in coalesced buckets of 250 MiB,
  /// two in flight (`_sync_module_states` → `broadcast_coalesced`, torch/csrc/distributed/c10d/comm.cpp), and the
  /// Reducer allocates one gradient bucket of every parameter (`bucket_size_limits = [sys.maxsize]` without
  /// `find_unused_parameters`, torch/nn/parallel/distributed.py `_ddp_init_helper`); the second step's first forward
  /// rebuilds the buckets in the order the gradients became ready, 1 MiB then 25 MiB (`Reducer::rebuild_buckets`,
  /// `initialize_buckets` clears the old buckets first; torch/csrc/distributed/c10d/reducer.cpp). Gradients are
  /// copied into and out of the bucket views in place: the buckets are `w·P` beside the `.grad`s, all step
  bool ddp = false;
  /// FSDP2: the model is built on the meta device and `to_empty` allocates only the shards (the reference trainer,
  /// apps/train/bwtrain/model.py `build_on_meta`, and torchtitan); else it is built on the GPU and `fully_shard`
  /// copies each parameter into its shard (measure.py's one-GPU FSDP2 recipe)
  bool meta_init = false;
  bool foreach_adamw = false;      ///< `AdamW(foreach=True)` (else fused)
  /// The optimizer the reference trainer builds (apps/train/bwtrain/engine.py `build_optimizer`), its states allocated
  /// in the first step, in parameter order, with each parameter's (sharded) local shape:
  /// - adamw: `torch.optim.AdamW` (fused, or foreach_adamw): `step` (fused: on the device), `exp_avg`, `exp_avg_sq`;
  ///   the foreach path's `_foreach_sqrt(exp_avg_sqs)` list, then the gradients set to None.
  /// - sgd: `torch.optim.SGD(momentum=0.9)`, weight decay 0, on CUDA the foreach path (`_default_to_fused_or_foreach`):
  ///   `momentum_buffer = grad.detach().clone()` per parameter on the first step, every later step in place
  ///   (`_foreach_mul_`, `_foreach_add_`): no temporaries (torch/optim/sgd.py `_multi_tensor_sgd`).
  /// - adafactor: `torch.optim.Adafactor` with its defaults, the single-tensor loop (`foreach=None` is not the foreach
  ///   path: torch/optim/_adafactor.py): `_init_group` makes every parameter's state first (`step` on the CPU; a matrix
  ///   `row_var` rows × 1 and `col_var` 1 × cols, a vector `variance` of its size), then the loop, parameter by
  ///   parameter: a matrix's `row_mean` (rows) and `col_mean` (cols), its `var_estimate = row_var @ col_var` (its full
  ///   size), a vector's `grad_squared` and `var_estimate = variance.clone()`, the update made in place on the estimate.
  ///   The loop's locals live until the next parameter of their kind rebinds them, so the previous parameter's
  ///   estimate (held by `update`) is alive while the next one's is made; all go when the step returns. One GPU and
  ///   DDP only: under FSDP2 the factors are DTensors of a new shape, which DTensor replicates (`new_factory_strategy`),
  ///   and the loop's in-place ops on the sharded gradient's partial norms depend on the PyTorch version
  ///   (pytorch/pytorch#164729): terms::replay_blocker keeps those plans on the cheap bound. The parameters follow the
  ///   harness decoder's order (per block the attention norm first); transformers registers the norms after the MLP,
  ///   so there the embedding's estimate is alive while q_proj's is made (the walk's term counts that order).
  enum class optimizer_kind { adamw, sgd, adafactor };
  optimizer_kind optimizer = optimizer_kind::adamw;
  /// transformers' modules (training_config::modules transformers): `LlamaRMSNorm.forward` in eager ops over an fp32
  /// copy, and the rotary tables of `LlamaRotaryEmbedding` in the residual dtype, shared by every block (fp32 RoPE
  /// under autocast); else the harness decoder's `F.rms_norm` and per-block bf16 tables
  bool eager_norm = false;
  /// per-head RMSNorm of q and k before RoPE (Qwen3: `Qwen3Attention` runs `q_norm(q_proj(x).view(…, head_dim))`, then
  /// `k_norm(k_proj(x)…)`, then `v_proj`), transformers' eager `Qwen3RMSNorm.forward` over head_dim whatever `eager_norm`
  /// says (the reference trainer fuses only the block and final norms); weights `q_norm`, `k_norm` (head_dim each)
  /// after `o_proj` in parameter order. Under autocast the fp32 weight makes q and k fp32, so RoPE runs in fp32 and SDPA
  /// casts its inputs back to bf16
  bool qk_norm = false;
  /// the reference trainer's chunked loss (apps/train/bwtrain/loss.py `chunked_loss`): the final norm's output split
  /// into 8 chunks (`torch.chunk`: ceil(T/8) tokens each), each chunk's LM head + fp32 `F.cross_entropy(…, reduction="sum")`
  /// under a non-reentrant `torch.utils.checkpoint`; else the standard loss over all logits
  bool chunked_loss = false;
  std::vector<bool> checkpointed;  ///< per block: recomputed in backward (torch.utils.checkpoint, non-reentrant)
  /// per block: its seven linears are torchao 0.18's `Float8Linear` (tensorwise dynamic scaling, eager; the reference
  /// trainer's fp8, apps/train/bwtrain/precision.py): no autocast weight cast; each forward casts its bf16 input and its
  /// weight to float8 and saves the bf16 input (`matmul_with_hp_or_float8_args`), each backward casts the gradient
  /// twice, the weight and the input again (see replay_step_trace)
  std::vector<bool> float8;
  /// the float8 blocks run torchao's rowwise recipe (`Float8LinearConfig.from_recipe_name("rowwise")`, the reference
  /// trainer's fp8-rowwise): axiswise scales (a few bytes per row, left out), and the two backward GEMMs without fast
  /// accumulation, which `addmm_float8_unwrapped` runs with unit scales and then scales in place by the fp32 product of
  /// the row and column scales, a rows × cols tensor allocated before the bf16 output (torchao/float8/float8_ops.py
  /// @v0.18.0: `post_inverse_scale = a_inverse_scale * b_inverse_scale`, `output *= post_inverse_scale`; the in-place
  /// bf16 × fp32 product casts in the CUDA kernel: TensorIteratorBase::compute_types makes dtype temporaries for
  /// CPU operations only, aten/src/ATen/TensorIterator.cpp). The forward GEMM uses fast accumulation: no rescale
  bool float8_rowwise = false;
  /// the float8 blocks are torchao 0.18's MXFP8 linear instead (the reference trainer's mxfp8: MXFP8TrainingOpConfig's
  /// weight wrapper → `mx_mm`, torchao/prototype/moe_training/mxfp8_linear.py @v0.18.0; bf16 weights only, as the
  /// plan rules require): the same saved tensors (the bf16 input and the weight) and the same custom autograd function,
  /// but one-kernel casts (e4m3 elements and one E8M0 scale per 32: Triton dim0 `triton_to_mxfp8_dim0`, CUDA dim1
  /// `mxfp8_quantize_cuda`) and each GEMM's scales copied into the blocked layout `_scaled_mm` takes (`to_blocked`:
  /// rows padded to 128, scale columns to 4, two copies, the first gone when the second is made; the blocked scales go
  /// when `_addmm_mx_dispatch` returns, after the GEMM's output; prototype/mx_formats/mx_tensor.py, utils.py); no cast
  /// goes before the function returns (see replay_step_trace's mx_fwd, mx_bwd)
  bool mxfp8 = false;
  std::uint64_t workspace = 0;     ///< cuBLAS/cuBLASLt workspaces, allocated at the first matmul
  int steps = 5;                   ///< optimizer steps replayed (the optimizer's states appear in the first)
  /// stop once a step leaves the allocator as the step before left it: every later step would repeat it (the peaks
  /// are those of all `steps`); false replays every step
  bool stop_at_steady_state = true;
  /// micro-batches per optimizer step (gradient accumulation): each runs forward and backward, the gradients (FSDP2:
  /// the sharded gradients) are kept across them, the optimizer steps after the last
  std::int64_t grad_accum = 1;
  /// stop the replay at the first request after an out-of-memory, after peak reserved passes this many bytes, or, in
  /// the first step's micro-batches, once the live requests plus the states the optimizer will add pass it (the
  /// second step holds both: a lower bound of its reserved; not with DDP, which rebuilds its buckets there) — the
  /// caller wants only the verdict past it: replay_result::stopped; the default replays every step
  std::uint64_t stop_reserved_above = std::numeric_limits<std::uint64_t>::max();
};

/// Result of a replay: the allocator's counters over every step, and the allocated bytes at the moments of the
/// last step that `measure.py` records.
struct replay_result {
  std::uint64_t peak_reserved = 0;   ///< `torch.cuda.max_memory_reserved()` over the run
  std::uint64_t peak_allocated = 0;  ///< `torch.cuda.max_memory_allocated()` over the last step
  std::uint64_t reserved = 0;        ///< reserved at the end
  bool oom = false;                  ///< a request failed after the cache was released
  std::uint64_t oom_request = 0;     ///< bytes of the first failing request
  int steps = 0;                     ///< steps replayed (fewer than step_shape::steps at the steady state)
  /// stopped early (step_shape::stop_reserved_above): out of memory or past the threshold; the peaks are those so far,
  /// peak_reserved at least the lower bound that stopped it
  bool stopped = false;
};

/// Bytes of each bucket when tensors of `bytes` (in the order given) are grouped as DDP groups them: a tensor joins
/// the open bucket, which closes once its size reaches the current limit; the limits are taken in turn, the last one
/// kept (`compute_bucket_assignment_by_size`, torch/csrc/distributed/c10d/reducer.cpp; one dtype and device). An empty
/// `limits` puts everything in one bucket. Shapes: `bytes` one entry per tensor; returns one entry per bucket, in
/// order, the last possibly below its limit.
[[nodiscard]] inline std::vector<std::uint64_t> bucket_assignment(const std::vector<std::uint64_t>& bytes,
                                                                  const std::vector<std::uint64_t>& limits) {
  std::vector<std::uint64_t> out;
  std::uint64_t open = 0;
  bool any = false;
  std::size_t li = 0;
  for (const std::uint64_t b : bytes) {
    open += b;
    any = true;
    if (!limits.empty() && open >= limits[li]) {
      out.push_back(open);
      open = 0;
      any = false;
      if (li + 1 < limits.size()) ++li;
    }
  }
  if (any) out.push_back(open);
  return out;
}

/// Replays the allocation and free sequence of `steps` training steps of the eager decoder (Llama layout: RMSNorm,
/// Q/K/V/O, with Qwen3's per-head q/k RMSNorm where `m.qk_norm` says so, RoPE, SDPA flash attention with native GQA,
/// SwiGLU, standard loss over fp32 logits, AdamW, SGD or Adafactor) through caching_allocator `a`. Each step runs `grad_accum` micro-batches, forward and backward, then the optimizer.
///
/// The sequence is what PyTorch allocates, tensor by tensor: parameters in construction order (an untied-size head
/// allocated and dropped when tied; `model.to(bfloat16)` casting one parameter at a time); per block in forward
/// the norm output and rstd, autocast's weight casts (cached for the forward; arguments cast right to left, as
/// GCC evaluates the pack in `autocast_mode.h`'s `WrapFunction_`) and input casts, RoPE's temporaries, SDPA's
/// output and log-sum-exp, the residual adds, the SwiGLU intermediates; what autograd saves stays, the rest is
/// freed when Python drops it; a checkpointed block keeps its input only and recomputes in backward (stopping
/// once its last saved tensor exists: non-reentrant early stop). The loss: bf16 logits, their fp32 copy, the
/// fp32 log-softmax (saved). Backward node by node in autograd's order: the loss gradients (4+4)·T·V, the head,
/// then per block the MLP, norm, O projection, FlashAttention-2 backward (dq, dk, dv, fp32 dq accumulator,
/// softmax_d, GQA-expanded dk/dv), RoPE, Q/K/V; weight gradients as the matmul returns them (bf16, converted to
/// fp32 under autocast) and kept as `.grad`; saved tensors freed as each node finishes. With gradient accumulation a
/// later micro-batch's weight gradient is added into the `.grad` the first one left (AccumulateGrad `+=`; under autocast
/// through its fp32 cast), and FSDP2 adds each later reduce-scatter output into the sharded gradient and drops it
/// (`foreach_reduce`: `sharded_param.grad += new_sharded_grad`, torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py;
/// the reference trainer reduce-scatters every micro-batch). Optimizer (step_shape::optimizer): its states on the first
/// step (AdamW: step, exp_avg, exp_avg_sq per parameter; SGD: the momentum buffer; Adafactor: the factored second
/// moment), AdamW's foreach temporaries or Adafactor's per-parameter estimates, gradients set to None in parameter
/// order. Sources: `torch/nn/modules`, `torch/utils/checkpoint.py`, `torch/optim/adamw.py`, `torch/optim/sgd.py`,
/// `torch/optim/_adafactor.py`,
/// `aten/src/ATen/native/transformers/cuda/flash_attn/flash_api.cpp` (mha_bwd), `aten/src/ATen/autocast_mode.h`;
/// transformers `src/transformers/models/qwen3/modeling_qwen3.py` (`Qwen3RMSNorm`, `Qwen3Attention.forward`);
/// the trace reproduces `measure.py`'s peak allocated bytes on all 27 H200 rows of `h200-calibration.jsonl`.
inline replay_result replay_step_trace(const step_shape& m, caching_allocator& a) {
  using u64 = std::uint64_t;
  const u64 h = static_cast<u64>(m.hidden), hd = static_cast<u64>(m.head_dim);
  const u64 q = static_cast<u64>(m.heads) * hd, kv = static_cast<u64>(m.kv_heads) * hd;
  const u64 F = static_cast<u64>(m.intermediate), V = static_cast<u64>(m.vocab), nh = static_cast<u64>(m.heads);
  const u64 seq = static_cast<u64>(m.seq), T = static_cast<u64>(m.micro_batch) * seq;
  const std::size_t L = static_cast<std::size_t>(m.layers);
  const bool fsdp = m.fsdp2, amp = m.amp && !fsdp, gqa = m.kv_heads != m.heads, hf = m.eager_norm;
  const u64 N = fsdp && m.shards > 1 ? static_cast<u64>(m.shards) : 1;  // FSDP2 shard count
  const bool meta = (fsdp || m.ddp) && m.meta_init;
  const u64 R = amp ? 4 : 2;                 // residual stream bytes
  const u64 W = (amp || fsdp) ? 4 : 2;       // stored parameter, gradient and AdamW state bytes
  const u64 GW = amp ? 4 : 2;                // bytes of the embedding gradient autograd produces
  auto ck = [&](std::size_t i) { return i < m.checkpointed.size() && m.checkpointed[i]; };
  struct stop_replay {};  // thrown by A once the caller's question is answered (step_shape::stop_reserved_above)
  const bool may_stop = m.stop_reserved_above != std::numeric_limits<u64>::max();
  // Before the first optimizer step: the rounded bytes of the optimizer states it will allocate, when the next step repeats
  // this one's requests with them (see the step loop), else 0. At every moment of the first step's micro-batches the
  // second step holds the same requests plus the states (and the cuBLAS workspace), and reserved >= allocated >=
  // requested, so `requested() + ahead` is a lower bound of the replay's peak reserved: once it passes the threshold the
  // verdict is known before the first step ends.
  u64 ahead = 0;
  auto A = [&](u64 bytes) {
    const int hdl = a.malloc(bytes);
    if (may_stop && (a.oom() || a.peak_reserved() > m.stop_reserved_above ||
                     a.requested() + ahead > m.stop_reserved_above))
      throw stop_replay{};
    return hdl;
  };
  auto Fr = [&](int& hdl) { a.free(hdl); hdl = -1; };
  auto f8 = [&](std::size_t i) { return i < m.float8.size() && m.float8[i]; };
  // torchao 0.18's eager cast of `n` elements of `src` bytes to float8, tensorwise (hp_tensor_to_float8_dynamic,
  // torchao/float8/float8_scaling_utils.py; tensor_to_amax, to_fp8_saturated in float8_utils.py; _ToFloat8ConstrFunc in
  // float8_training_tensor.py): `torch.max(torch.abs(x))` (the abs goes after the max), `x.to(float32)` (a copy of a
  // bf16 x; an fp32 x is returned as is) `* scale` (the copy goes after the product), `clamp` (torch 2.11's eager casts
  // do not saturate), `.to(float8)`; the clamped and the scaled tensors go when the cast returns. The amax and scale
  // scalars (a few bytes each, in the small pool) are left out. Returns the float8 tensor, 1 B per element.
  const u64 WB = (m.amp && !m.fsdp2) ? 4 : 2;  // bytes of the weight a Float8Linear casts: fp32 under autocast, else bf16
  auto f8cast = [&](u64 n, u64 src) {
    int ab = A(src * n);
    Fr(ab);
    int c = src == 4 ? -1 : A(4 * n);
    int p = A(4 * n);
    Fr(c);
    int k = A(4 * n);
    const int f = A(n);
    Fr(k); Fr(p);
    return f;
  };
  // Float8Linear.forward of `rows` tokens, `in` → `out` features, a weight of `wn` elements
  // (`matmul_with_hp_or_float8_args.forward`, torchao/float8/float8_linear.py @v0.18.0): it saves the bf16 input and
  // the weight's view (no new tensor), casts the input, then the weight (`weight.t()` keeps its column-major layout
  // through the cast, so `preprocess_addmm` copies nothing), `torch._scaled_mm` writes the bf16 output, and the two
  // float8 tensors go when forward returns. Returns the output.
  auto f8_fwd = [&](u64 rows, u64 in, u64 out, u64 wn) {
    int xi = f8cast(rows * in, 2);
    int wf = f8cast(wn, WB);
    const int y = A(2 * rows * out);
    Fr(xi); Fr(wf);
    return y;
  };
  // Float8Linear's backward (`matmul_with_hp_or_float8_args.backward`): the gradient cast for grad_input, the weight
  // cast again, `preprocess_addmm` making the weight's float8 transpose column-major (a copy, gone with the mm),
  // grad_input (bf16); the gradient cast again and the saved input cast for grad_weight, the gradient's transpose made
  // row-major and the input made column-major (copies, gone with the mm), grad_weight (bf16, as `dw`); the four float8
  // locals go when backward returns. Returns grad_input.
  // Rowwise (step_shape::float8_rowwise): each backward GEMM's fp32 rescale tensor (rows × in, then out × in) lives from
  // before its output to `addmm_float8_unwrapped`'s return, before `float8_mm` drops the layout copies.
  auto f8_bwd = [&](u64 rows, u64 in, u64 out, u64 wn, int& dw) {
    int g0 = f8cast(rows * out, 2);
    int w0 = f8cast(wn, WB);
    int wt = A(wn);
    int s0 = m.float8_rowwise ? A(4 * rows * in) : -1;
    const int gi = A(2 * rows * in);
    Fr(s0);
    Fr(wt);
    int g1 = f8cast(rows * out, 2);
    int x1 = f8cast(rows * in, 2);
    int ac = A(rows * out), bc = A(rows * in);
    int s1 = m.float8_rowwise ? A(4 * wn) : -1;
    dw = A(2 * wn);
    Fr(s1);
    Fr(ac); Fr(bc);
    Fr(g0); Fr(w0); Fr(g1); Fr(x1);
    return gi;
  };

  // torchao 0.18's MXFP8 linear (step_shape::mxfp8). `mxcast` casts `n` elements of a rows × cols tensor: the e4m3
  // elements, then the E8M0 scales (one per 32 along the cast's dimension). `blocked` runs `to_blocked` on an r × c
  // scale matrix (torchao/prototype/mx_formats/utils.py): rows padded to 128 and columns to 4 in a zeroed copy when
  // they are not multiples already (gone at return), the 128 × 4 tiles gathered by a reshape of the permuted view (a
  // copy, unless there is one row or one column of tiles), then transposed into a second copy, which is returned (the
  // first goes then). Returns the handle of the blocked scales.
  auto blocked = [&](u64 r, u64 c) {
    const u64 rb = (r + 127) / 128, cb = (c + 3) / 4, sz = rb * 128 * cb * 4;
    int pad = (r % 128 != 0 || c % 4 != 0) ? A(sz) : -1;
    int first = (rb > 1 && cb > 1) ? A(sz) : -1;
    const int out = A(sz);
    Fr(first);
    Fr(pad);
    return out;
  };
  auto mxcast = [&](u64 n, int& scale) {
    const int e = A(n);
    scale = A((n + 31) / 32);
    return e;
  };
  // mx_mm.forward: the input and the weight cast along dim0, the GEMM's two blocked scales, the bf16 output; the casts
  // go when forward returns. Returns the output.
  auto mx_fwd = [&](u64 rows, u64 in, u64 out, u64 wn) {
    int xs = -1, ws = -1;
    int x = mxcast(rows * in, xs), w = mxcast(wn, ws);
    int ab = blocked(rows, in / 32), bb = blocked(out, in / 32);
    const int y = A(2 * rows * out);
    Fr(ab); Fr(bb);
    Fr(x); Fr(xs); Fr(w); Fr(ws);
    return y;
  };
  // mx_mm.backward: the gradient along dim0, the weight along dim1, grad_input (bf16) with its GEMM's blocked scales;
  // then the gradient and the saved input along dim1, the weight gradient (bf16, as `dw`) with its blocked scales; the
  // eight cast tensors go when backward returns. Returns grad_input.
  auto mx_bwd = [&](u64 rows, u64 in, u64 out, u64 wn, int& dw) {
    int g0s = -1, w1s = -1, g1s = -1, x1s = -1;
    int g0 = mxcast(rows * out, g0s), w1 = mxcast(wn, w1s);
    int ab = blocked(rows, out / 32), bb = blocked(in, out / 32);
    const int gi = A(2 * rows * in);
    Fr(ab); Fr(bb);
    int g1 = mxcast(rows * out, g1s), x1 = mxcast(rows * in, x1s);
    ab = blocked(out, rows / 32);
    bb = blocked(in, rows / 32);
    dw = A(2 * wn);
    Fr(ab); Fr(bb);
    Fr(g0); Fr(g0s); Fr(w1); Fr(w1s); Fr(g1); Fr(g1s); Fr(x1); Fr(x1s);
    return gi;
  };

  replay_result res;
  try {  // (stop_replay: the caller's question is answered; res holds the peaks so far)
  // parameters: embedding, per block [attn_norm, wq(, bq), wk(, bk), wv(, bv), wo(, q_norm, k_norm), ffn_norm, w1, w3,
  // w2], norm(, out)
  enum : std::size_t { an, wq, bq, wk, bk, wv, bv, wo, qn, kn, fn, w1, w3, w2, nparam };
  auto present = [&](std::size_t k) {
    return (m.qkv_bias || (k != bq && k != bk && k != bv)) && (m.qk_norm || (k != qn && k != kn));
  };
  std::size_t offset[nparam] = {};  // position of parameter k within a block
  std::size_t per_block = 0;
  for (std::size_t k = 0; k < nparam; ++k) { offset[k] = per_block; per_block += present(k) ? 1 : 0; }
  std::vector<u64> numel, dim0;  // parameter order: elements, and the size of dim 0 (the dimension FSDP2 shards)
  numel.push_back(V * h); dim0.push_back(V);
  for (std::size_t i = 0; i < L; ++i) {
    const u64 n[nparam] = {h, q * h, q, kv * h, kv, kv * h, kv, h * q, hd, hd, h, F * h, F * h, h * F};
    const u64 d[nparam] = {h, q, q, kv, kv, kv, kv, h, hd, hd, h, F, F, h};
    for (std::size_t k = 0; k < nparam; ++k)
      if (present(k)) { numel.push_back(n[k]); dim0.push_back(d[k]); }
  }
  auto pidx = [&](std::size_t i, std::size_t k) { return 1 + i * per_block + offset[k]; };  // parameter k of block i
  numel.push_back(h); dim0.push_back(h);  // final norm
  std::vector<int> param;
  if (meta) {  // built on the meta device: nothing on the GPU until to_empty allocates the shards (below)
    if (!m.tied) { numel.push_back(V * h); dim0.push_back(V); }
    param.assign(numel.size(), -1);
  } else {
    for (const u64 n : numel) param.push_back(A(4 * n));
    int head_tmp = A(4 * V * h);  // nn.Linear(h, V) weight, replaced by the embedding when tied
    if (m.tied) Fr(head_tmp);
    else { numel.push_back(V * h); dim0.push_back(V); param.push_back(head_tmp); }
  }
  const std::size_t head = m.tied ? 0 : numel.size() - 1;
  // FSDP2 shards dim 0 into N chunks of ceil(dim0 / N) rows (`_chunk_with_empty`) and pads every rank's shard to the
  // first's (FSDPParam._init_sharded_param); the unsharded parameter and the all-gather are N padded shards
  // (FSDPParam.init_all_gather_outputs). Without FSDP2, or on one rank, a shard is the whole parameter.
  auto shard = [&](std::size_t k) { return (dim0[k] + N - 1) / N * (numel[k] / dim0[k]); };
  auto padded = [&](std::size_t k) { return N * shard(k); };
  // Adafactor's factored state (step_shape::optimizer): a matrix's local rows (dim 0 sharded) and its columns
  auto matrix = [&](std::size_t k) { return numel[k] != dim0[k]; };
  auto factor_rows = [&](std::size_t k) { return (dim0[k] + N - 1) / N; };
  auto factor_cols = [&](std::size_t k) { return numel[k] / dim0[k]; };
  // the rounded bytes of parameter k's optimizer states (allocated in the first step)
  auto state_bytes = [&](std::size_t k) -> u64 {
    switch (m.optimizer) {
      case step_shape::optimizer_kind::sgd: return round_size(W * shard(k));
      case step_shape::optimizer_kind::adafactor:
        return matrix(k) ? round_size(W * factor_rows(k)) + round_size(W * factor_cols(k)) : round_size(W * shard(k));
      case step_shape::optimizer_kind::adamw: break;
    }
    return (m.foreach_adamw ? 0 : round_size(4)) + 2 * round_size(W * shard(k));
  };
  // FSDP2 groups: each block, then the root (embedding, final norm, untied head)
  std::vector<std::vector<std::size_t>> groups(L + 1);
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t k = 0; k < per_block; ++k) groups[i].push_back(1 + i * per_block + k);
  groups[L] = {0, 1 + L * per_block};
  if (!m.tied) groups[L].push_back(head);
  if (!amp && !fsdp && !meta)  // model.to(bfloat16): each parameter cast, then the fp32 tensor dropped
    for (std::size_t k = 0; k < numel.size(); ++k) { const int nb = A(2 * numel[k]); a.free(param[k]); param[k] = nb; }
  if (meta)  // module.to_empty(device=cuda): each parameter's padded shard (fp32; DDP: the master dtype), in parameter order
    for (std::size_t k = 0; k < numel.size(); ++k) param[k] = A(W * shard(k));
  else if (fsdp)  // fully_shard: each parameter copied into its padded shard (FSDPParam._init_sharded_param), old dropped
    for (const auto& g : groups)
      for (const std::size_t k : g) { const int nb = A(4 * shard(k)); a.free(param[k]); param[k] = nb; }
  // DDP's construction: the coalesced broadcast of the parameters (flat copies of up to 250 MiB groups, two in
  // flight), then the Reducer's one bucket of every parameter (see step_shape::ddp)
  int ddp_bucket = -1;
  std::vector<int> ddp_buckets;
  if (m.ddp) {
    std::vector<u64> pb;
    for (const u64 n : numel) pb.push_back(W * n);
    std::vector<int> in_flight;
    for (const u64 g : bucket_assignment(pb, {250 * MiB})) {
      if (in_flight.size() >= 2) { Fr(in_flight.front()); in_flight.erase(in_flight.begin()); }
      in_flight.push_back(A(g));
    }
    for (int& f : in_flight) Fr(f);
    u64 all = 0;
    for (const u64 b : pb) all += b;
    ddp_bucket = A(all);
  }
  const int tokens = A(8 * (T + static_cast<u64>(m.micro_batch)));
  const int inp = A(8 * T), lab = A(8 * T);
  (void)tokens; (void)inp; (void)lab;

  std::vector<int> grads(numel.size(), -1), ug(numel.size(), -1), unsharded(numel.size(), -1);
  std::vector<int> rs_out(L + 1, -1);
  bool states = false;
  // handles of one block's forward
  struct block_t {
    int x = -1, yn = -1, r1 = -1, yc[3] = {-1, -1, -1}, qkv[3] = {-1, -1, -1}, cs = -1, sn = -1, o = -1, lse = -1;
    int mid = -1, y2 = -1, r2 = -1, yc1 = -1, g = -1, s = -1, yc3 = -1, u = -1, p = -1;
    int n1x = -1, n1s = -1, n2x = -1, n2s = -1;  // eager_norm: each norm's saved fp32 input copy and normalized tensor
    int wb[nparam] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    int qkx[2] = {-1, -1}, qkr[2] = {-1, -1}, qks[2] = {-1, -1};  // qk_norm: q/k norms' fp32 input copy, rstd, bf16 normalized
    int emb[2] = {-1, -1};  // qk_norm under autocast: RoPE's fp32 q and k, alive until the attention returns
  };
  // From the second step on every step makes the same requests (the first also allocates the optimizer states and the
  // cuBLAS workspace); once a step leaves the allocator as the step before left it (caching_allocator::state), every
  // later step starts where it started and repeats it exactly, so the replay stops there with the peaks of all `steps`
  // (test "allocator: a replay stops at the steady state with the peaks of every step").
  std::vector<std::uint64_t> before;
  // The second step makes the first one's requests (the same sizes, in the same order, freed at the same moments): the
  // gradients, FSDP2's unsharded gradients and reduce-scatter outputs go by the end of every step; only the first step
  // allocates the workspace and the states, which stay. DDP rebuilds its buckets in the second step, so not there.
  if (may_stop && m.steps >= 2 && !m.ddp)
    for (std::size_t k = 0; k < numel.size(); ++k)
      ahead += state_bytes(k);
  for (int step = 0; step < m.steps; ++step) {
    a.reset_peak_allocated();  // the peak of the last step replayed: of every later step at the steady state
    const std::int64_t micro_batches = std::max<std::int64_t>(1, m.grad_accum);
    int last_graph[4] = {-1, -1, -1, -1};  // the last micro-batch's RoPE tables, loss and its gradient
   for (std::int64_t micro = 0; micro < micro_batches; ++micro) {
    std::vector<block_t> blk(L);
    int head_cast = -1;
    auto wcast = [&](block_t& b, std::size_t i, std::size_t k) {  // autocast's cached bf16 copy of a weight
      if (amp && !f8(i) && b.wb[k] < 0) b.wb[k] = A(2 * numel[pidx(i, k)]);  // (Float8Linear calls no F.linear)
    };
    // a linear's output: `F.linear` (bf16 GEMM) or Float8Linear's (f8_fwd)
    auto lin = [&](std::size_t i, std::size_t k, u64 in, u64 out) {
      if (!f8(i)) return A(2 * T * out);
      return m.mxfp8 ? mx_fwd(T, in, out, numel[pidx(i, k)]) : f8_fwd(T, in, out, numel[pidx(i, k)]);
    };
    // transformers' LlamaRMSNorm.forward (and Qwen3RMSNorm's, the same code) over `rows` vectors of `width` elements:
    // `x.to(float32)` (with `copy`, a bf16 input's fp32 copy, which `pow` and `mul` save; an fp32 input is returned as
    // is), `pow(2)`, `mean` (the local `variance`, dropped at return), `+ eps`, `rsqrt` (saved), `x * rstd` (the local
    // `hidden_states`: for an fp32 input the fp32 tensor the weight's `mul` saves), `.to(input_dtype)` (bf16: a copy,
    // saved by the weight's `mul`), `weight * …` (the output: fp32 under autocast, where the weight is fp32). Without
    // `keep` (a checkpointed block's first forward) nothing is saved: each tensor goes when Python drops it. Returns
    // the output.
    auto norm_fwd_w = [&](int& x32, int& rstd, int& hs, bool keep, u64 width, u64 rows, bool copy) {
      const u64 n = rows * width;
      if (copy) x32 = A(4 * n);
      int p2 = A(4 * n), var = A(4 * rows);
      Fr(p2);
      int ve = A(4 * rows);
      rstd = A(4 * rows);
      Fr(ve);
      int hs32 = A(4 * n);
      if (!keep) { Fr(rstd); if (copy) Fr(x32); }
      if (copy) hs = A(2 * n);
      else hs = hs32;
      const int out = A(R * n);
      if (copy) { if (!keep) Fr(hs); Fr(hs32); }
      else if (!keep) Fr(hs);
      Fr(var);
      return out;
    };
    // the Q/K/V projections of block i (autocast: each casts the normalized input and its weight) and the SwiGLU MLP
    // (gate, silu, up, product; the weight casts at each use), as both decoders run them
    auto qkv_fwd = [&](std::size_t i, block_t& b, bool keep) {
      const std::size_t lw[3] = {wq, wk, wv};
      const u64 dim[3] = {q, kv, kv};
      for (int j = 0; j < 3; ++j) {
        wcast(b, i, lw[j]);
        if (amp) b.yc[j] = A(2 * T * h);  // autocast's cast of the input (Float8Linear's own `input.to(bf16)`)
        b.qkv[j] = lin(i, lw[j], h, dim[j]);
        if (amp && !keep) Fr(b.yc[j]);
        if (m.qk_norm && j < 2) {  // q_norm / k_norm per head; the projection's output goes when the norm returns
          const int y = norm_fwd_w(b.qkx[j], b.qkr[j], b.qks[j], keep, hd, T * dim[j] / hd, true);
          Fr(b.qkv[j]);
          b.qkv[j] = y;
        }
      }
    };
    auto mlp_fwd = [&](std::size_t i, block_t& b) {
      wcast(b, i, w1);
      if (amp) b.yc1 = A(2 * T * h);
      b.g = lin(i, w1, h, F);
      b.s = A(2 * T * F);
      wcast(b, i, w3);
      if (amp) b.yc3 = A(2 * T * h);
      b.u = lin(i, w3, h, F);
      b.p = A(2 * T * F);
      wcast(b, i, w2);
    };
    // forward of block i from input x: keep = autograd's saved tensors stay (else freed as Python drops them);
    // recompute = checkpoint recompute, which stops once the last saved tensor exists. Returns the output.
    auto block_fwd = [&](std::size_t i, block_t& b, bool keep, bool recompute) {
      auto sv = [&](int& hdl) { if (!keep) Fr(hdl); };
      b.yn = A(R * T * h);
      b.r1 = A(4 * T);
      sv(b.r1);
      const u64 dim[3] = {q, kv, kv};
      qkv_fwd(i, b, keep);
      b.cs = A(2 * seq * hd);
      b.sn = A(2 * seq * hd);
      const u64 QE = m.qk_norm ? R : 2;  // bytes of RoPE's q and k: a q/k norm's output is fp32 under autocast
      for (int j = 0; j < 2; ++j) {  // q·cos + rotate_half(q)·sin
        int t1 = A(QE * T * dim[j]), ng = A(QE / 2 * T * dim[j]), ct = A(QE * T * dim[j]);
        Fr(ng);
        int t2 = A(QE * T * dim[j]);
        Fr(ct);
        const int rr = A(QE * T * dim[j]);
        Fr(t1); Fr(t2);
        if (m.qk_norm) { b.emb[j] = rr; continue; }
        Fr(b.qkv[j]);
        b.qkv[j] = rr;
      }
      if (m.qk_norm) {  // transformers' attention: `query_states, key_states = apply_rotary_pos_emb(…)` drops the norms' outputs
        Fr(b.qkv[0]); Fr(b.qkv[1]);
        if (amp) { b.qkv[1] = A(2 * T * kv); b.qkv[0] = A(2 * T * q); }  // SDPA's autocast casts, right to left
        else { b.qkv[0] = b.emb[0]; b.qkv[1] = b.emb[1]; b.emb[0] = b.emb[1] = -1; }
      }
      b.o = A(2 * T * q);
      b.lse = A(4 * T * nh);
      wcast(b, i, wo);
      int ao = lin(i, wo, q, h);
      Fr(b.emb[0]); Fr(b.emb[1]);  // fp32 q and k die with the attention's frame, after o_proj
      b.mid = A(R * T * h);
      Fr(ao);
      b.y2 = A(R * T * h);
      b.r2 = A(4 * T);
      sv(b.r2);
      if (!amp) sv(b.yn); else Fr(b.yn);
      sv(b.qkv[0]); sv(b.qkv[1]); sv(b.qkv[2]); sv(b.o); sv(b.lse); sv(b.cs); sv(b.sn);
      mlp_fwd(i, b);
      int out = -1;
      if (!recompute) { int d = lin(i, w2, F, h); out = A(R * T * h); Fr(d); }
      else if (f8(i)) { int d = lin(i, w2, F, h); Fr(d); }  // (see block_fwd_hf)
      sv(b.yc1); sv(b.g); sv(b.s); sv(b.yc3); sv(b.u); sv(b.p);
      if (amp) Fr(b.y2); else sv(b.y2);
      sv(b.mid);
      return out;
    };
    auto norm_fwd = [&](int& x32, int& rstd, int& hs, bool keep) { return norm_fwd_w(x32, rstd, hs, keep, h, T, !amp); };
    // the transformers decoder layer (LlamaDecoderLayer, LlamaAttention, LlamaMLP; eager_norm): the norms above, RoPE
    // with the model's tables in the residual dtype (fp32 q and k under autocast, which SDPA's autocast casts back to
    // bf16 and saves; the fp32 ones die with the attention's frame, after o_proj), the projections' q and k dropped
    // once both are rotated; the norm outputs are arguments dropped when the attention or MLP returns; a bf16 block
    // input and the mid-block residual are saved by no norm and go when `residual` is rebound / the layer returns.
    auto block_fwd_hf = [&](std::size_t i, block_t& b, bool keep, bool recompute) {
      auto sv = [&](int& hdl) { if (!keep) Fr(hdl); };
      int yn = norm_fwd(b.n1x, b.r1, b.n1s, keep);
      const u64 dim[3] = {q, kv, kv};
      qkv_fwd(i, b, keep);
      const u64 E = amp ? 4 : 2;  // RoPE's output bytes: the tables' dtype promotes q and k
      const u64 QE = m.qk_norm ? R : 2;  // bytes of RoPE's q and k: a q/k norm's output is fp32 under autocast
      for (int j = 0; j < 2; ++j) {  // q·cos + rotate_half(q)·sin
        int t1 = A(E * T * dim[j]), ng = A(QE / 2 * T * dim[j]), ct = A(QE * T * dim[j]);
        Fr(ng);
        int t2 = A(E * T * dim[j]);
        Fr(ct);
        b.emb[j] = A(E * T * dim[j]);
        Fr(t1); Fr(t2);
      }
      Fr(b.qkv[0]); Fr(b.qkv[1]);
      if (amp) { b.qkv[1] = A(2 * T * kv); b.qkv[0] = A(2 * T * q); }  // SDPA's autocast casts, right to left
      else { b.qkv[0] = b.emb[0]; b.qkv[1] = b.emb[1]; b.emb[0] = b.emb[1] = -1; }
      b.o = A(2 * T * q);
      b.lse = A(4 * T * nh);
      wcast(b, i, wo);
      int ao = lin(i, wo, q, h);
      Fr(b.emb[0]); Fr(b.emb[1]);
      if (amp) Fr(yn);
      else b.yn = yn;
      b.mid = A(R * T * h);
      Fr(ao);
      if (!amp && keep && !recompute) Fr(b.x);  // `residual = hidden_states`: the bf16 input nothing saved
      sv(b.qkv[0]); sv(b.qkv[1]); sv(b.qkv[2]); sv(b.o); sv(b.lse);
      if (!amp) sv(b.yn);
      b.y2 = norm_fwd(b.n2x, b.r2, b.n2s, keep);
      mlp_fwd(i, b);
      int out = -1;
      if (!recompute) {
        int d = lin(i, w2, F, h);
        if (amp) Fr(b.y2);
        out = A(R * T * h);
        Fr(d);
      } else {
        // a recompute stops when the down projection's saves are packed: F.linear's mm saves before its kernel, but a
        // custom autograd.Function (Float8Linear's matmul_with_hp_or_float8_args) saves after its forward returns, so
        // that forward runs whole (its casts and output) and its output goes with the early stop (torch/utils/checkpoint.py
        // `_StopRecomputationError`; torch/autograd/function.py: `_save_variables` after `forward`)
        if (f8(i)) { int d = lin(i, w2, F, h); Fr(d); }
        if (amp) Fr(b.y2);
      }
      sv(b.yc1); sv(b.g); sv(b.s); sv(b.yc3); sv(b.u); sv(b.p);
      if (!amp) sv(b.y2);
      if (amp) sv(b.mid); else Fr(b.mid);
      return out;
    };
    // FSDP2: the all-gather output, a flat bf16 buffer of the group's N padded shards on the copy-in stream (1; this
    // rank's all-gather input is a view of it), kept until the next group's all-gather; then each parameter's
    // unsharded bf16 tensor on the compute stream (foreach_all_gather, foreach_all_gather_copy_out). Post-backward:
    // an fp32 reduce-scatter input of the padded unsharded gradients on the compute stream, the bf16 gradients
    // dropped, the fp32 output, one padded shard per parameter, on the reduce-scatter stream (2); the sharded
    // gradients are views of it (foreach_reduce). Source: torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py,
    // _fsdp_param_group.py, _fsdp_param.py.
    int ag = -1, rs_in = -1;
    // One rank (N = 1): `unshard` gathers nothing (an empty all-gather output) and `wait_for_unshard` copies each
    // shard into its unsharded parameter, keeping no all-gather state (`world_size == 1` in FSDPParamGroup.unshard and
    // wait_for_unshard); the measured one-GPU fsdp2 rows' peak allocated agrees (no gathered block at the loss backward)
    auto unshard = [&](std::size_t g) {
      if (N > 1) {
        u64 n = 0;
        for (const std::size_t k : groups[g]) n += padded(k);
        const int buf = a.malloc(2 * n, 1);
        Fr(ag);
        ag = buf;
      }
      for (const std::size_t k : groups[g]) unsharded[k] = A(2 * padded(k));
    };
    // Backward (FSDPParamGroup.pre_backward: `unshard` is a no-op for a prefetched group, then `wait_for_unshard`, then
    // `_backward_prefetch`): the group's copy-out allocates its unsharded parameters and, outside forward, frees the
    // all-gather output at once ("we free the all-gather result immediately after the current copy-out"); then the
    // next group's all-gather output is allocated on the copy-in stream and waits as `pend` for that group's backward
    int pend = -1;
    auto bwd_wait = [&](std::size_t g) {
      for (const std::size_t k : groups[g]) unsharded[k] = A(2 * padded(k));
      Fr(pend);
    };
    auto bwd_prefetch = [&](std::size_t g) {
      if (N == 1) return;  // (nothing gathered on one rank)
      u64 n = 0;
      for (const std::size_t k : groups[g]) n += padded(k);
      pend = a.malloc(2 * n, 1);
    };
    auto reshard = [&](std::size_t g) { for (const std::size_t k : groups[g]) Fr(unsharded[k]); };
    auto post_backward = [&](std::size_t g) {
      u64 n = 0;
      for (const std::size_t k : groups[g]) n += padded(k);
      reshard(g);  // post_backward_reshard: the unsharded parameters go before the reduce
      Fr(rs_in);   // the previous group's reduce_scatter_state is dropped before foreach_reduce
      const int in = A(4 * n);
      for (const std::size_t k : groups[g]) Fr(ug[k]);  // unsharded_grads.clear() after the copy-in
      // the reduce-scatter output on its stream; when accumulating, a later micro-batch's output is added into the
      // sharded gradient it already holds (`sharded_param.grad += new_sharded_grad`, foreach_reduce) and dropped
      const int out = a.malloc(4 * n / N, 2);
      if (rs_out[g] < 0) rs_out[g] = out;
      else a.free(out);
      rs_in = in;
    };
    // ---- forward
    if (m.ddp && step == 1 && micro == 0) {  // DDP's _pre_forward: the buckets rebuilt in gradient-ready order
      // (the first synced backward, the last micro-batch of step 0: no_sync pushes no ready order); ready order: the
      // untied head, the final norm, each block from the last (down, up, gate, MLP norm, O, then V, K, Q with their
      // biases and norms, the attention norm), the embedding (with a tied head's second use) last
      Fr(ddp_bucket);
      std::vector<u64> ready;
      if (!m.tied) ready.push_back(W * numel[head]);
      ready.push_back(W * numel[1 + L * per_block]);
      for (std::size_t i = L; i-- > 0;)
        for (const std::size_t k : {w2, w3, w1, fn, wo, bv, wv, kn, bk, wk, qn, bq, wq, an})
          if (present(k)) ready.push_back(W * numel[pidx(i, k)]);
      ready.push_back(W * numel[0]);
      for (const u64 b : bucket_assignment(ready, {1 * MiB, 25 * MiB})) ddp_buckets.push_back(A(b));
    }
    if (fsdp) unshard(L);
    int x = A(R * T * h);  // embedding output (fp32 under autocast: embedding is not autocast)
    if (step == 0 && micro == 0 && m.workspace > 0) (void)A(m.workspace);  // at the first matmul
    if (hf) {  // LlamaRotaryEmbedding.forward: fp32 position ids, freqs, cat, cos and sin, cast to the residual dtype
      int pos = A(4 * seq), fr = A(4 * seq * hd / 2), emb = A(4 * seq * hd);
      int cosv = A(4 * seq * hd), sinv = A(4 * seq * hd);
      if (!amp) { const int cb = A(2 * seq * hd), sb = A(2 * seq * hd); Fr(cosv); Fr(sinv); cosv = cb; sinv = sb; }
      Fr(pos); Fr(fr); Fr(emb);
      blk.emplace_back();
      blk[L].cs = cosv;
      blk[L].sn = sinv;
    } else {  // rope tables
      int inv = A(4 * hd / 2), ar = A(4 * seq), fr = A(4 * seq * hd / 2), emb = A(4 * seq * hd);
      const int cosv = A(4 * seq * hd), sinv = A(4 * seq * hd);
      Fr(inv); Fr(ar); Fr(fr); Fr(emb);
      blk.emplace_back();  // slot L holds the tables
      blk[L].cs = cosv;
      blk[L].sn = sinv;
    }
    for (std::size_t i = 0; i < L; ++i) {
      blk[i].x = x;
      if (fsdp) unshard(i);
      x = hf ? block_fwd_hf(i, blk[i], !ck(i), false) : block_fwd(i, blk[i], !ck(i), false);
      if (fsdp && m.reshard_after_forward) reshard(i);
    }
    int fx = -1, fs = -1, rf = -1;  // the final norm's saved fp32 input copy, normalized tensor (eager_norm) and rstd
    int yf = -1;
    if (hf) {
      yf = norm_fwd(fx, rf, fs, true);
      if (!amp) Fr(x);  // the last block's bf16 output: nothing saved it
    } else {
      yf = A(R * T * h);
      rf = A(4 * T);
    }
    int yfc = -1, lg = -1, ls = -1, loss = -1;
    // chunked_loss: chunks of Tc tokens (torch.chunk: ceil(T/8), so ceil(T/Tc) chunks, the last one shorter)
    const u64 Tc = (T + 7) / 8, chunks = (T + Tc - 1) / Tc;
    auto chunk_rows = [&](u64 c) { return std::min(Tc, T - c * Tc); };
    if (m.chunked_loss) {
      // each chunk under a non-reentrant checkpoint saves nothing: autocast's cast of the head weight (cached, from the
      // first chunk on) and of the chunk, the bf16 logits (gone at the upcast), the fp32 upcast and log-softmax (gone
      // when `F.cross_entropy` returns), the chunk's loss added into the running total; the final norm's output stays
      // (the chunks' checkpoint inputs are views of it)
      int total = A(4);
      for (u64 c = 0; c < chunks; ++c) {
        const u64 n = chunk_rows(c);
        if (amp && head_cast < 0) head_cast = A(2 * V * h);
        const int xc = amp ? A(2 * n * h) : -1;
        const int lgc = A(2 * n * V);
        int xcf = xc;
        Fr(xcf);
        int lfc = A(4 * n * V);
        int lgf = lgc;
        Fr(lgf);
        int lsc = A(4 * n * V), lc = A(4);
        Fr(lsc); Fr(lfc);
        const int t2 = A(4);
        Fr(total); Fr(lc);
        total = t2;
      }
      loss = A(4);
      Fr(total);
    } else {
      if (amp) head_cast = A(2 * V * h);
      yfc = amp ? A(2 * T * h) : -1;
      lg = A(2 * T * V);
      if (amp && !hf) Fr(yf);
      int lf = A(4 * T * V);
      ls = A(4 * T * V);
      loss = A(4);
      Fr(lf);
      if (amp && hf) Fr(yf);  // the model's output (last_hidden_state) goes when LlamaForCausalLM.forward returns
      Fr(lg);
    }
    // FSDP2: the root's post-forward (the loss runs inside the root module: measure.py's model, the trainer's
    // CausalLMTrainModule) frees the last block's all-gather output, which implicit forward prefetching kept in
    // `comm_ctx.all_gather_state` for a next group's wait (torch/distributed/fsdp/_fully_shard/_fsdp_state.py
    // `_post_forward`: "Free the last all-gather result if needed"); backward's first all-gather follows (gl, below)
    if (fsdp) Fr(ag);
    if (amp) {  // autocast exits: the cache drops the copies only checkpointed blocks (and the chunked loss) used
      for (std::size_t i = 0; i < L; ++i)
        if (ck(i)) for (int& w : blk[i].wb) Fr(w);
      if (m.chunked_loss) Fr(head_cast);
    }
    // ---- backward
    auto grad = [&](std::size_t k, int& tmp, bool same) {  // a weight gradient arrives as `tmp`
      if (fsdp) {  // the unsharded bf16 gradient, accumulated in place
        if (ug[k] >= 0) Fr(tmp);
        else { ug[k] = tmp; tmp = -1; }
        return;
      }
      if (grads[k] >= 0) {
        if (!same) { int c = A(W * numel[k]); Fr(tmp); Fr(c); }
        else Fr(tmp);
      } else if (same) {
        grads[k] = tmp; tmp = -1;
      } else {
        grads[k] = A(W * numel[k]); Fr(tmp);
      }
    };
    // transformers' LlamaRMSNorm backward, node by node. Each MulBackward0 returns both full-size gradients, the input
    // buffer `g` goes when its apply returns, and the engine's validate_outputs then sums the gradient of the
    // broadcast operand to its shape (torch/csrc/autograd/engine.cpp `call_function`, `validate_outputs`), before the
    // node's saved tensors are released: the weight's `g·hs` and `g·w`; ToCopyBackward0; the rstd's `g·rstd` and
    // `g·x`; RsqrtBackward0; MeanBackward1's expanded gradient; PowBackward0's `grad·(2·x.pow(1))`; the input buffer
    // adds the two input gradients in place. Frees `g` and the saved tensors; returns the input gradient.
    // over `rows` vectors of `width` elements; `copy` as in norm_fwd_w. Under autocast with a bf16 input (a q/k norm) the
    // output and its gradient are fp32 and validate_outputs casts the normalized tensor's gradient to bf16 before
    // ToCopyBackward0 casts it back to fp32.
    auto norm_bwd_w = [&](int& g, int& x32, int& rstd, int& hs, std::size_t wk, u64 width, u64 rows, bool copy) {
      const u64 n = rows * width, NO = R;
      int t = A(NO * n), ghs = A(NO * n);
      Fr(g);
      int dw = A(W * width);
      Fr(t);
      if (copy && NO == 4) { const int c = A(2 * n); Fr(ghs); ghs = c; }
      Fr(hs);
      if (wk < numel.size()) grad(wk, dw, true);
      else Fr(dw);  // the final norm: its gradient is allocated after the blocks (below)
      if (copy) { const int c = A(4 * n); Fr(ghs); ghs = c; }
      int gx = A(4 * n), t2 = A(4 * n);
      Fr(ghs);
      int gr = A(4 * rows);
      Fr(t2);
      int gq = A(4 * rows);
      Fr(gr); Fr(rstd);
      int gm = A(4 * n);
      Fr(gq);
      int p1 = A(4 * n), p2 = A(4 * n);
      Fr(p1);
      int gp = A(4 * n);
      Fr(p2); Fr(gm); Fr(gp);
      Fr(x32);
      if (copy) { const int c = A(2 * n); Fr(gx); gx = c; }
      return gx;
    };
    auto norm_bwd = [&](int& g, int& x32, int& rstd, int& hs, std::size_t wk) {
      return norm_bwd_w(g, x32, rstd, hs, wk, h, T, !amp);
    };
    // A Float8Linear under autocast returns a bf16 gradient for its fp32 weight, which the engine casts to fp32 in
    // validate_outputs inside call_function, before the node's saved tensors are released (torch/csrc/autograd/engine.cpp
    // `evaluate_function`: `fn.release_variables()` after `call_function`): the saved input `saved` goes after the cast,
    // then AccumulateGrad keeps it or adds it into `.grad`. A checkpointed block's recomputed input is held by the
    // backward's local only and goes when it returns, and F.linear's weight gradient is cast by the cached copy's own
    // ToCopyBackward0, a later node: there the saved input goes first (the callers' other branch).
    auto late = [&](std::size_t i) { return f8(i) && amp && !ck(i); };
    auto wgrad_late = [&](std::size_t k, int& dw, int& saved) {
      int c = A(4 * numel[k]);
      Fr(dw);
      Fr(saved);
      if (grads[k] >= 0) Fr(c);
      else grads[k] = c;
    };
    // a linear's backward: grad_input, then the bf16 weight gradient as `dw` (the mm's two outputs, or f8_bwd's)
    auto lin_bwd = [&](std::size_t i, std::size_t k, u64 in, u64 out, int& dw) {
      if (f8(i)) return m.mxfp8 ? mx_bwd(T, in, out, numel[pidx(i, k)], dw) : f8_bwd(T, in, out, numel[pidx(i, k)], dw);
      const int gi = A(2 * T * in);
      dw = A(2 * numel[pidx(i, k)]);
      return gi;
    };
    int gl = A(4);
    // FSDP2: the root's pre-backward hook, which its post-forward registered on the loss, runs before the loss's own
    // backward and prefetches the block whose forward ran last (`_backward_prefetch` over `post_forward_order`): block
    // L - 1's all-gather output is allocated now and lives through the loss and head backward (grad-op: the block is
    // still unsharded, nothing is gathered)
    if (fsdp && m.reshard_after_forward && L > 0) bwd_prefetch(L - 1);
    int dyf = -1;
    if (m.chunked_loss) {
      // the chunks last to first (autograd's order by sequence number): the first unpack of a chunk's saved tensor
      // recomputes it in a fresh autocast context (the head weight cast again) up to its last saved tensor, the
      // log-softmax; then NllLossBackward, LogSoftmaxBackward, the upcast's ToCopyBackward, the head's mm (its saved
      // casts released after it) and, under autocast, the chunk's input gradient cast to fp32. Every chunk's head
      // gradient goes to one node, whose input buffer sums them until the last chunk is done (torch/csrc/autograd/
      // engine.cpp: a node runs once its dependencies reach 0; input_buffer.cpp adds in place): under autocast the
      // ToCopyBackward0 of the forward's cached bf16 cast, which all chunks used (aten/src/ATen/autocast_mode.cpp
      // `cached_cast`; the recompute's own casts are not in the graph backward runs), else the weight's AccumulateGrad.
      // Under autocast that node then casts the sum to fp32 for AccumulateGrad. The chunks' input gradients wait in
      // `chunk`'s SplitBackward, which builds the whole gradient once the last one arrives; the final norm's output
      // (the chunks' checkpoint input, held by the checkpoint frames) goes when the last chunk's mm releases its saved
      // tensors (torch/utils/checkpoint.py `_CheckpointFrame`).
      std::vector<int> dxc;
      int hsum = -1;  // the head gradient's input buffer
      for (u64 c = chunks; c-- > 0;) {
        const u64 n = chunk_rows(c);
        int hc = amp ? A(2 * V * h) : -1;
        int xc = amp ? A(2 * n * h) : -1;
        int lgc = A(2 * n * V), lfc = A(4 * n * V);
        Fr(lgc);
        int lsc = A(4 * n * V);
        Fr(lfc);
        int dls = A(4 * n * V), dlf = A(4 * n * V);
        Fr(dls); Fr(lsc);
        int dlg = A(2 * n * V);
        Fr(dlf);
        int dxn = A(2 * n * h), dw = A(2 * V * h);
        Fr(dlg); Fr(xc); Fr(hc);
        if (c == 0) Fr(yf);
        if (hsum < 0) hsum = dw;
        else Fr(dw);  // added into the buffer
        if (amp) { const int d4 = A(4 * n * h); Fr(dxn); dxn = d4; }
        dxc.push_back(dxn);
      }
      if (amp) { const int c32 = A(4 * V * h); Fr(hsum); hsum = c32; }  // the cast's ToCopyBackward0, once
      grad(head, hsum, true);
      dyf = A(R * T * h);
      for (int& d : dxc) Fr(d);
    } else {
      int dls = A(4 * T * V), dlf = A(4 * T * V);
      Fr(dls); Fr(ls);
      int dlg = A(2 * T * V);
      Fr(dlf);
      dyf = A(2 * T * h);
      int dwh = A(2 * V * h);
      Fr(dlg);
      if (amp) { Fr(yfc); Fr(head_cast); }
      grad(head, dwh, !amp);
      if (amp) { const int d4 = A(4 * T * h); Fr(dyf); dyf = d4; }
    }
    int dx = -1;
    if (hf) dx = norm_bwd(dyf, fx, rf, fs, numel.size());
    else { dx = A(R * T * h); Fr(dyf); Fr(rf); }
    if (!amp) Fr(yf);
    Fr(x);
    for (std::size_t ii = L; ii-- > 0;) {
      const std::size_t i = ii;
      if (fsdp && m.reshard_after_forward) {  // the group's copy-out, then the backward prefetch of the next group
        bwd_wait(i);
        if (i > 0) bwd_prefetch(i - 1);
      }
      int dd = amp ? A(2 * T * h) : -1;
      block_t rb;
      block_t& b = ck(i) ? rb : blk[i];
      if (ck(i)) { rb.x = blk[i].x; (void)(hf ? block_fwd_hf(i, rb, true, true) : block_fwd(i, rb, true, true)); }
      int dw = -1;
      int dp = lin_bwd(i, w2, F, h, dw);
      Fr(dd);
      if (late(i)) wgrad_late(pidx(i, w2), dw, b.p);
      else { Fr(b.p); Fr(b.wb[w2]); grad(pidx(i, w2), dw, !amp); }
      int ds = A(2 * T * F), du = A(2 * T * F);
      Fr(dp); Fr(b.s);
      int dg = A(2 * T * F);
      Fr(ds); Fr(b.g);
      int dyc3 = lin_bwd(i, w3, h, F, dw);
      Fr(du); Fr(b.u);
      if (late(i)) wgrad_late(pidx(i, w3), dw, b.yc3);
      else { Fr(b.yc3); Fr(b.wb[w3]); grad(pidx(i, w3), dw, !amp); }
      int b2 = dyc3;
      if (amp) { b2 = A(4 * T * h); Fr(dyc3); }
      int dyc1 = lin_bwd(i, w1, h, F, dw);
      Fr(dg);
      if (late(i)) wgrad_late(pidx(i, w1), dw, b.yc1);
      else { Fr(b.yc1); Fr(b.wb[w1]); grad(pidx(i, w1), dw, !amp); }
      if (amp) { int c1 = A(4 * T * h); Fr(dyc1); Fr(c1); }
      else { Fr(dyc1); Fr(b.y2); }
      if (hf) {
        int gx = norm_bwd(b2, b.n2x, b.r2, b.n2s, pidx(i, fn));
        Fr(b.mid);
        Fr(gx);  // added into the residual's gradient
      } else {
        int dx1p = A(R * T * h), dn2 = A(W * h);
        Fr(b2); Fr(b.mid); Fr(b.r2);
        grad(pidx(i, fn), dn2, true);
        Fr(dx1p);
      }
      int dao = amp ? A(2 * T * h) : -1;
      int dO = lin_bwd(i, wo, q, h, dw);
      Fr(dao); Fr(b.wb[wo]);
      grad(pidx(i, wo), dw, !amp);
      int dqkv[3] = {A(2 * T * q), A(2 * T * kv), A(2 * T * kv)};
      int sd = A(4 * T * nh), dqa = A(4 * T * q);
      int dke = gqa ? A(2 * T * q) : -1, dve = gqa ? A(2 * T * q) : -1;
      Fr(dqa); Fr(sd); Fr(dke); Fr(dve); Fr(dO);
      Fr(b.qkv[0]); Fr(b.qkv[1]); Fr(b.qkv[2]); Fr(b.o); Fr(b.lse);
      int drh[2] = {-1, -1};
      for (int j : {1, 0}) {  // RoPE backward, k then q
        const u64 dim = j == 0 ? q : kv;
        if (amp && m.qk_norm) {  // fp32 q and k (the q/k norm's output): SDPA's cast back to fp32, RoPE in fp32
          int g32 = A(4 * T * dim);
          Fr(dqkv[j]);
          int r32 = A(4 * T * dim), dng = A(2 * T * dim);  // grad·sin (the cat's gradient), neg's on one half
          drh[j] = A(4 * T * dim);
          Fr(dng); Fr(r32);
          int c32 = A(4 * T * dim);  // grad·cos, added into drh
          Fr(c32); Fr(g32);
          continue;
        }
        if (hf && amp) {  // fp32 RoPE: SDPA's cast back to fp32, each product's fp32 gradient cast to the bf16 input
          const int g32 = A(4 * T * dim);
          Fr(dqkv[j]);
          int r32 = A(4 * T * dim), drot = A(2 * T * dim);
          Fr(r32);
          int dng = A(T * dim);
          drh[j] = A(2 * T * dim);
          Fr(dng); Fr(drot);
          int c32 = A(4 * T * dim), dq1 = A(2 * T * dim);
          Fr(c32); Fr(dq1);
          dqkv[j] = g32;
          Fr(dqkv[j]);
          continue;
        }
        int drot = A(2 * T * dim), dng = A(T * dim);
        drh[j] = A(2 * T * dim);
        Fr(dng); Fr(drot);
        int dq1 = A(2 * T * dim);
        Fr(dq1); Fr(dqkv[j]);
      }
      Fr(b.cs); Fr(b.sn);
      int b1 = -1;
      const std::size_t lw[3] = {wv, wk, wq};
      int* src[3] = {&dqkv[2], &drh[1], &drh[0]};
      const int ycj[3] = {2, 1, 0};
      for (int j = 0; j < 3; ++j) {  // v, k, q projections (k_norm's backward before k_proj's, q_norm's before q_proj's)
        if (m.qk_norm && j > 0) {
          const int r = ycj[j];
          drh[r] = norm_bwd_w(drh[r], b.qkx[r], b.qkr[r], b.qks[r], pidx(i, r ? kn : qn), hd, T * (r ? kv : q) / hd, true);
        }
        int dy = lin_bwd(i, lw[j], h, j < 2 ? kv : q, dw);
        Fr(*src[j]);
        if (late(i)) {
          wgrad_late(pidx(i, lw[j]), dw, b.yc[ycj[j]]);
        } else {
          if (amp) { Fr(b.yc[ycj[j]]); Fr(b.wb[lw[j]]); }
          grad(pidx(i, lw[j]), dw, !amp);
        }
        if (amp) { int c = A(4 * T * h); Fr(dy); dy = c; }
        if (b1 < 0) b1 = dy; else Fr(dy);
      }
      if (!amp) Fr(b.yn);
      if (hf) {
        int gx = norm_bwd(b1, b.n1x, b.r1, b.n1s, pidx(i, an));
        Fr(blk[i].x);
        Fr(gx);
      } else {
        int dx0p = A(R * T * h), dn1 = A(W * h);
        Fr(b1); Fr(b.r1); Fr(blk[i].x);
        grad(pidx(i, an), dn1, true);
        Fr(dx0p);
      }
      if (fsdp) post_backward(i);
    }
    int dE = A(GW * V * h);
    Fr(dx);
    grad(0, dE, true);
    const std::size_t norm = 1 + L * per_block;
    if (fsdp) {
      if (ug[norm] < 0) ug[norm] = A(2 * h);
      post_backward(L);
      Fr(rs_in);
      Fr(ag);
    } else if (grads[norm] < 0) {
      grads[norm] = A(W * h);
    }
    // an earlier micro-batch's RoPE tables and loss go before the next one runs; the last one's after the optimizer
    // step (measure.py drops them with the step's references)
    if (micro + 1 < micro_batches) { Fr(blk[L].cs); Fr(blk[L].sn); Fr(loss); Fr(gl); }
    else { last_graph[0] = blk[L].cs; last_graph[1] = blk[L].sn; last_graph[2] = loss; last_graph[3] = gl; }
   }
    // ---- optimizer
    ahead = 0;  // (the states are allocated now, and held from here on)
    if (!states) {  // of each parameter's (sharded) local tensor
      for (std::size_t k = 0; k < numel.size(); ++k) {
        switch (m.optimizer) {
          case step_shape::optimizer_kind::adamw:
            if (!m.foreach_adamw) (void)A(4);                // fused: state['step'] on the device
            (void)A(W * shard(k)); (void)A(W * shard(k));    // exp_avg, exp_avg_sq
            break;
          case step_shape::optimizer_kind::sgd: (void)A(W * shard(k)); break;  // momentum_buffer, the gradient's clone
          case step_shape::optimizer_kind::adafactor:
            if (matrix(k)) { (void)A(W * factor_rows(k)); (void)A(W * factor_cols(k)); }  // row_var, col_var
            else (void)A(W * shard(k));                                     // variance
            break;
        }
      }
      states = true;
    }
    if (m.optimizer == step_shape::optimizer_kind::adamw && m.foreach_adamw) {  // _multi_tensor_adamw: torch._foreach_sqrt(exp_avg_sqs), one list
      std::vector<int> tmp;
      for (std::size_t k = 0; k < numel.size(); ++k) tmp.push_back(A(W * shard(k)));
      for (int& t : tmp) Fr(t);
    }
    if (m.optimizer == step_shape::optimizer_kind::adafactor) {  // _single_tensor_adafactor's locals, rebound per parameter
      int row_mean = -1, col_mean = -1, grad_squared = -1, update = -1;
      for (std::size_t k = 0; k < numel.size(); ++k) {
        if (matrix(k)) {
          int r = A(W * factor_rows(k)); Fr(row_mean); row_mean = r;  // vector_norm(grad, dim=-1), squared and divided in place
          int c = A(W * factor_cols(k)); Fr(col_mean); col_mean = c;  // vector_norm(grad, dim=-2)
          int gathered = N > 1 ? A(W * factor_cols(k)) : -1;            // FSDP2: col_var replicated for the product
          const int estimate = A(W * shard(k));                  // row_var @ col_var
          Fr(gathered);
          Fr(update); update = estimate;                         // clamp_, rsqrt_, mul_(grad): in place
        } else {
          int g2 = A(W * shard(k)); Fr(grad_squared); grad_squared = g2;  // grad * grad
          const int estimate = A(W * shard(k));                            // variance.clone()
          Fr(update); update = estimate;
        }
      }
      Fr(row_mean); Fr(col_mean); Fr(grad_squared); Fr(update);  // the step returns
    }
    for (int& g : grads) Fr(g);  // zero_grad(set_to_none=True), parameter order
    for (int& o : rs_out) Fr(o);  // FSDP2: a group's reduce-scatter output dies with its last gradient view
    for (int& g : last_graph) Fr(g);
    res.steps = step + 1;
    if (m.stop_at_steady_state && step + 1 < m.steps) {
      std::vector<std::uint64_t> now = a.state();
      if (step >= 1 && now == before) break;
      before = std::move(now);
    }
  }
  } catch (const stop_replay&) {
    res.stopped = true;
  }
  // stopped by the bound: peak reserved is at least the bound (the replay would reach it in the second step)
  res.peak_reserved = std::max(a.peak_reserved(), res.stopped ? a.requested() + ahead : 0);
  res.peak_allocated = a.peak_allocated();
  res.reserved = a.reserved();
  res.oom = a.oom();
  res.oom_request = a.oom_request();
  return res;
}

}  // namespace bwplan::alloc
