// memsafe/backend/host/executor.hpp — the tile loop: one pass over tiles, fused generate → reduce.
//
// All temporaries are allocated up front from the accountant, one workspace per worker thread,
// sized by the plan; nothing is allocated per tile. Threads take row blocks from a shared counter;
// when row blocks are fewer than threads, the threads split each row block's columns and their
// partial accumulators are merged (the monoid protocol makes that exact for min/argmin/top-k).
#pragma once
#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../core/accounting.hpp"
#include "../../core/threads.hpp"
#include "../../plan/plan.hpp"
#include "monoids.hpp"
#include "tile.hpp"

namespace memsafe::host {

// The host backend runs the implementation types of memsafe::detail (nodes, the accountant, ...).
using namespace memsafe::detail;

/// The thread of `P` that owns block `b` when blocks whose work falls with their index are dealt
/// in serpentine order (0, 1, …, P−1, P−1, …, 0, 0, 1, …): fixed for a given P, so results that
/// depend on which thread summed what are deterministic, and the threads' loads even out.
inline std::size_t serpentine_thread(std::size_t b, std::size_t P) {
  const std::size_t round = b / P, pos = b % P;
  return round % 2 == 0 ? pos : P - 1 - pos;
}

/// Run `body(ctx, t)` for every t in [0, n): t = 0 on the caller, the others on new threads;
/// rethrow the first exception once every started thread has been joined. When the system refuses
/// a thread (e.g. no address space left for its stack) the bodies it would have run run on the
/// caller instead, after its own: the work is done with fewer threads, never lost, and no thread is
/// left unjoined. POSIX threads (core/threads.hpp), not std::thread: <thread> alone costs ≈ 0.25 s
/// of parsing per translation unit. One instance, whatever the callers: the thread machinery is
/// compiled once per translation unit (docs/design.md, "Compile time"); a template on nothing only
/// so that translation units that never run it do not compile it.
template <class = void>
void parallel_for(std::size_t n, void* ctx, void (*body)(void*, std::size_t)) {
  if (n <= 1) {
    body(ctx, std::size_t{0});
    return;
  }
  struct shared {
    void* ctx;
    void (*body)(void*, std::size_t);
    std::exception_ptr err;
    bool failed = false;
    void run(std::size_t t) noexcept {
      try {
        body(ctx, t);
      } catch (...) {
        if (claim_first(failed)) err = std::current_exception();
      }
    }
  } st{ctx, body, {}};
  struct task {
    shared* st;
    std::size_t t;
  };
  std::vector<task> tasks;
  std::vector<os_thread> pool;
  std::size_t started = 1;  // bodies [1, started) run on their own threads
  try {
    tasks.reserve(n - 1);  // never reallocated below: each thread holds a pointer to its task
    pool.reserve(n - 1);
    for (; started < n; ++started) {
      tasks.push_back({&st, started});
      os_thread th;
      if (!th.start([](void* p) -> void* {
            const task& tk = *static_cast<const task*>(p);
            tk.st->run(tk.t);
            return nullptr;
          }, &tasks.back()))
        break;
      pool.push_back(th);
    }
  } catch (const std::bad_alloc&) {  // the reservations: run the rest here
  }
  st.run(0);
  for (std::size_t t = started; t < n; ++t) st.run(t);
  for (auto& th : pool) th.join();
  if (st.err) std::rethrow_exception(st.err);
}

/// Run `body(t)` for every t in [0, n) as parallel_for does.
template <class Body>
void parallel(std::size_t n, Body&& body) {
  parallel_for(n, const_cast<void*>(static_cast<const void*>(&body)), [](void* b, std::size_t t) {
    (*static_cast<std::remove_reference_t<Body>*>(b))(t);
  });
}

/// Bytes one worker needs for expression E (normalised) reduced by monoid `mon` on ti×tj tiles.
template <class E, class Mon>
std::size_t per_thread_bytes(const E& e, const Mon& mon, std::size_t ti, std::size_t tj) {
  using T = typename E::value_type;
  return host::align64(ti * tj * sizeof(T)) + tile_gen<E>::workspace_bytes(e, ti, tj) + mon.accum_bytes(ti) +
         mon.scratch_bytes(ti, tj);
}

/// P objects built in place and destroyed in reverse order (the workers of a run: built once,
/// never moved, so no reallocation path is compiled per worker type).
template <class Wk>
class worker_array {
 public:
  explicit worker_array(std::size_t cap) : mem_(new unsigned char[cap * sizeof(Wk) + alignof(Wk)]), cap_(cap) {}
  worker_array(const worker_array&) = delete;
  worker_array& operator=(const worker_array&) = delete;
  ~worker_array() {
    while (size_ > 0) data()[--size_].~Wk();
    delete[] mem_;
  }
  /// Build the next one from `make()`'s result (in place: guaranteed copy elision).
  template <class Make>
  Wk& add(Make&& make) {
    if (size_ == cap_) throw error("memsafe: internal: more workers than planned");
    Wk* w = ::new (static_cast<void*>(data() + size_)) Wk(make());
    ++size_;
    return *w;
  }
  Wk& operator[](std::size_t t) { return data()[t]; }

 private:
  Wk* data() {
    const auto a = reinterpret_cast<std::uintptr_t>(mem_);
    return reinterpret_cast<Wk*>((a + alignof(Wk) - 1) / alignof(Wk) * alignof(Wk));
  }
  unsigned char* mem_;  // owned (no <memory>: see parallel_for)
  std::size_t cap_, size_ = 0;
};

/// The steps of a row job on its workers, reached through pointers by run_row_schedule.
struct row_steps {
  void* ctx;
  void (*start)(void* ctx, std::size_t t, std::size_t i0, std::size_t ni);
  void (*fold)(void* ctx, std::size_t t, std::size_t i0, std::size_t ni, std::size_t cb0, std::size_t cb1);
  void (*merge)(void* ctx, std::size_t t, std::size_t ni);  // worker t's partial into worker 0's
  void (*finish)(void* ctx, std::size_t t, std::size_t i0, std::size_t ni);
};

/// run_row_blocks' schedule, compiled once per translation unit: threads take whole row blocks
/// from a shared counter, or — fewer row blocks than threads — share each block's column tiles
/// and merge their partials into worker 0.
template <class = void>  // one instance, compiled only where used (see parallel_for)
void run_row_schedule(std::size_t n, const tile_plan& p, const row_steps& s) {
  const std::size_t ti = p.tile_rows, P = p.threads, nrb = p.row_blocks, ncb = p.col_blocks;
  if (!p.split_columns) {
    relaxed_counter<std::size_t> next{0};
    parallel(P, [&](std::size_t t) {
      for (std::size_t rb; (rb = next.fetch_add(1)) < nrb;) {
        const std::size_t i0 = rb * ti, ni = std::min(ti, n - i0);
        s.start(s.ctx, t, i0, ni);
        s.fold(s.ctx, t, i0, ni, 0, ncb);
        s.finish(s.ctx, t, i0, ni);
      }
    });
    return;
  }
  for (std::size_t rb = 0; rb < nrb; ++rb) {
    const std::size_t i0 = rb * ti, ni = std::min(ti, n - i0);
    parallel(P, [&](std::size_t t) {
      s.start(s.ctx, t, i0, ni);
      s.fold(s.ctx, t, i0, ni, ncb * t / P, ncb * (t + 1) / P);
    });
    for (std::size_t t = 1; t < P; ++t) s.merge(s.ctx, t, ni);
    s.finish(s.ctx, 0, i0, ni);
  }
}

/// The row-block schedule shared by every row reduction (run_rows here, run_select in select.hpp).
/// One accounted workspace per thread and a worker built on each (`make(workspace)`), then
/// run_row_schedule. A worker w provides
///   w.start(i0, ni)             begin rows [i0, i0 + ni)
///   w.fold(i0, ni, cb0, cb1)    fold column tiles [cb0, cb1) into them
///   w.merge_from(other, ni)     combine another worker's partial over other columns
///   w.finish(i0, ni)            write the rows to the output
/// An empty reduction (m = 0) writes the monoid's identity for every row, with no temporaries.
template <class Mon, class T, class Make>
void run_row_blocks(std::size_t n, std::size_t m, const Mon& mon, const out_spec<T>& out, const tile_plan& p,
                    accountant& acc, Make make) {
  if (n == 0) return;
  if (m == 0) {
    for (std::size_t i = 0; i < n; ++i) mon.identity(i, out);
    return;
  }
  using Wk = decltype(make(std::declval<std::byte*>()));
  const std::size_t P = p.threads;
  std::vector<temp_buffer<std::byte>> ws;
  ws.reserve(P);
  for (std::size_t t = 0; t < P; ++t) ws.emplace_back(acc, p.per_thread_bytes);
  worker_array<Wk> workers(P);
  for (std::size_t t = 0; t < P; ++t) workers.add([&] { return make(ws[t].data()); });
  const row_steps steps{
      &workers,
      [](void* c, std::size_t t, std::size_t i0, std::size_t ni) { (*static_cast<worker_array<Wk>*>(c))[t].start(i0, ni); },
      [](void* c, std::size_t t, std::size_t i0, std::size_t ni, std::size_t cb0, std::size_t cb1) {
        (*static_cast<worker_array<Wk>*>(c))[t].fold(i0, ni, cb0, cb1);
      },
      [](void* c, std::size_t t, std::size_t ni) {
        auto& w = *static_cast<worker_array<Wk>*>(c);
        w[0].merge_from(w[t], ni);
      },
      [](void* c, std::size_t t, std::size_t i0, std::size_t ni) { (*static_cast<worker_array<Wk>*>(c))[t].finish(i0, ni); }};
  run_row_schedule(n, p, steps);
}

/// A row-reduction worker: a tile generator for E, a monoid, and the tile buffer between them.
template <class E, class Mon>
struct worker {
  using T = typename E::value_type;
  tile_gen<E> gen;
  Mon mon;
  T* tile = nullptr;
  std::size_t tj, m;
  const out_spec<T>* out;
  worker(const E& e, const Mon& proto, std::byte* ws, std::size_t ti, std::size_t tj_, const out_spec<T>& o)
      : gen(e), mon(proto), tj(tj_), m(e.cols()), out(&o) {
    std::byte* cur = ws;
    tile = carve<T>(cur, ti * tj);
    gen.bind(cur, ti, tj);
    mon.bind(cur, ti, tj);
  }
  void start(std::size_t, std::size_t ni) { mon.init(ni); }
  void fold(std::size_t i0, std::size_t ni, std::size_t cb0, std::size_t cb1) {
    if constexpr (requires { mon.i0; }) {  // a monoid that writes tiles straight to the output
      mon.i0 = i0;
      mon.out = out;
    }
    for (std::size_t cb = cb0; cb < cb1; ++cb) {
      const std::size_t j0 = cb * tj, nj = std::min(tj, m - j0);
      gen.fill(i0, ni, j0, nj, tile, nj);
      mon.consume(tile, nj, ni, j0, nj);
    }
  }
  void merge_from(const worker& o, std::size_t ni) { mon.merge_from(o.mon, ni); }
  void finish(std::size_t i0, std::size_t ni) { mon.finish(i0, ni, *out); }
};

/// Reduce every row of the n×m lazy matrix `e` with `proto`, writing through `out`.
template <class E, class Mon>
void run_rows(const E& e, const Mon& proto, const out_spec<typename E::value_type>& out, const tile_plan& p,
              accountant& acc) {
  run_row_blocks(e.rows(), e.cols(), proto, out, p, acc, [&](std::byte* ws) {
    return worker<E, Mon>(e, proto, ws, p.tile_rows, p.tile_cols, out);
  });
}

/// C (P×Q, row-major, ldc) = A · B for lazy A (P×N) and B (N×Q), contracting N in tiles:
/// per output block, generate A[pb, tb] and B[tb, qb] and accumulate their product in double.
template <class EA, class EB>
std::size_t product_bytes(const EA& a, const EB& b, std::size_t tp, std::size_t tq, std::size_t tt) {
  using T = typename EA::value_type;
  return host::align64(tp * tt * sizeof(T)) + host::align64(tt * tq * sizeof(T)) +
         tile_gen<EA>::workspace_bytes(a, tp, tt) + tile_gen<EB>::workspace_bytes(b, tt, tq) +
         host::align64(tp * tq * sizeof(double));
}

/// One thread's part of a lazy × lazy product: the generators of both factors, their tiles and
/// the double accumulator of one output block.
template <class EA, class EB>
struct product_worker {
  using T = typename EA::value_type;
  tile_gen<EA> ga;
  tile_gen<EB> gb;
  T *ta, *tb;
  double* cacc;
  product_worker(const EA& a, const EB& b, std::byte* ws, std::size_t tp, std::size_t tq, std::size_t tt)
      : ga(a), gb(b) {
    std::byte* cur = ws;
    ta = carve<T>(cur, tp * tt);
    tb = carve<T>(cur, tt * tq);
    ga.bind(cur, tp, tt);
    gb.bind(cur, tt, tq);
    cacc = carve<double>(cur, tp * tq);
  }
  /// cacc = A[p0:p0+np, s] · B[s, q0:q0+nq] over the contraction blocks [t0, t1) of size tt.
  void accumulate(std::size_t p0, std::size_t np, std::size_t q0, std::size_t nq, std::size_t t0, std::size_t t1,
                  std::size_t tt, std::size_t N) {
    std::fill(cacc, cacc + np * nq, 0.0);
    for (std::size_t s0 = t0 * tt; s0 < std::min(t1 * tt, N); s0 += tt) {
      const std::size_t ns = std::min(tt, N - s0);
      ga.fill(p0, np, s0, ns, ta, ns);
      gb.fill(s0, ns, q0, nq, tb, nq);
      host::gemm_acc(np, nq, ns, ta, ns, tb, nq, cacc, nq);
    }
  }
};

/// symmetric_product: copy the blocks below the diagonal into the ones above it.
template <class T>
void mirror_blocks(T* C, std::size_t ldc, std::size_t P, std::size_t Q, std::size_t tp, std::size_t tq) {
  for (std::size_t i = 0; i < P; ++i)
    for (std::size_t j = i + 1; j < Q; ++j)
      if (j / tq > i / tp) C[i * ldc + j] = C[j * ldc + i];
}

template <class EA, class EB>
void run_product(const EA& a, const EB& b, typename EA::value_type* C, std::size_t ldc, const tile_plan& p,
                 accountant& acc) {
  using T = typename EA::value_type;
  const std::size_t P = a.rows(), Q = b.cols(), N = a.cols();
  if (P == 0 || Q == 0) return;
  if (N == 0) {
    for (std::size_t i = 0; i < P; ++i)
      for (std::size_t j = 0; j < Q; ++j) C[i * ldc + j] = T(0);
    return;
  }
  const std::size_t tp = p.tile_rows, tq = p.tile_cols, tt = p.tile_inner, nthreads = p.threads;
  std::vector<temp_buffer<std::byte>> ws;
  ws.reserve(nthreads);
  for (std::size_t t = 0; t < nthreads; ++t) ws.emplace_back(acc, p.per_thread_bytes);
  using pworker = product_worker<EA, EB>;
  worker_array<pworker> workers(nthreads);
  for (std::size_t t = 0; t < nthreads; ++t) workers.add([&] { return pworker(a, b, ws[t].data(), tp, tq, tt); });
  const std::size_t nb = p.row_blocks * p.col_blocks, nib = p.inner_blocks;
  auto store = [&](pworker& w, std::size_t p0, std::size_t np, std::size_t q0, std::size_t nq) {
    for (std::size_t r = 0; r < np; ++r)
      for (std::size_t c = 0; c < nq; ++c) C[(p0 + r) * ldc + q0 + c] = static_cast<T>(w.cacc[r * nq + c]);
  };
  auto block = [&](std::size_t blk, std::size_t& p0, std::size_t& np, std::size_t& q0, std::size_t& nq) {
    p0 = (blk / p.col_blocks) * tp;
    q0 = (blk % p.col_blocks) * tq;
    np = std::min(tp, P - p0);
    nq = std::min(tq, Q - q0);
    return !(p.symmetric && q0 > p0);  // A·Aᵀ: blocks above the diagonal are mirrored afterwards
  };
  auto mirror = [&] {
    if (p.symmetric) mirror_blocks(C, ldc, P, Q, tp, tq);
  };
  if (!p.split_columns) {
    relaxed_counter<std::size_t> next{0};
    parallel(nthreads, [&](std::size_t t) {
      for (std::size_t blk; (blk = next.fetch_add(1)) < nb;) {
        std::size_t p0, np, q0, nq;
        if (!block(blk, p0, np, q0, nq)) continue;
        workers[t].accumulate(p0, np, q0, nq, 0, nib, tt, N);
        store(workers[t], p0, np, q0, nq);
      }
    });
    mirror();
    return;
  }
  for (std::size_t blk = 0; blk < nb; ++blk) {
    std::size_t p0, np, q0, nq;
    if (!block(blk, p0, np, q0, nq)) continue;
    parallel(nthreads, [&](std::size_t t) {
      workers[t].accumulate(p0, np, q0, nq, nib * t / nthreads, nib * (t + 1) / nthreads, tt, N);
    });
    for (std::size_t t = 1; t < nthreads; ++t)
      for (std::size_t q = 0; q < np * nq; ++q) workers[0].cacc[q] += workers[t].cacc[q];
    store(workers[0], p0, np, q0, nq);
  }
  mirror();
}

}  // namespace memsafe::host
