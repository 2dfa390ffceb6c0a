// memsafe_mpi_sgpr_bench: the SGPR bound and its gradient over MPI ranks (memsafe::mpi::sgpr), one
// JSON line per run (from rank 0).
//   mpirun -np 2 memsafe_mpi_sgpr_bench --n 100000 --m 500 --d 9 --threads 1
//   memsafe_mpi_sgpr_bench --n 100000 --m 500 --d 9 --threads 2     (one process: -np 1 or no mpirun)
// The training points are sharded over the ranks by rows; every rank generates only its own rows,
// the same numbers whatever the number of ranks (a hash of the global row and column), and all ranks
// hold the inducing points (the first m points of another stream). Reported: the time of the whole
// call (min and median over --reps after one warm-up), its communication share (agreement and the
// two allreduces), the bytes each rank contributed, and the largest peak temporaries of a rank.
#include <memsafe/mpi_gp.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

double value_at(std::uint64_t row, std::uint64_t col, std::uint64_t seed) {
  std::uint64_t z = row * 0x9E3779B97F4A7C15ull + col * 0xBF58476D1CE4E5B9ull + seed * 0x94D049BB133111EBull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return double(z >> 11) / double(1ull << 53);
}

std::string arg(int argc, char** argv, const char* name, const char* dflt) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return dflt;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const std::size_t n = std::stoull(arg(argc, argv, "--n", "100000"));
  const std::size_t m = std::stoull(arg(argc, argv, "--m", "500"));
  const std::size_t d = std::stoull(arg(argc, argv, "--d", "9"));
  const unsigned threads = unsigned(std::stoul(arg(argc, argv, "--threads", "1")));
  const std::size_t budget = memsafe::parse_bytes(arg(argc, argv, "--budget", "64MiB"));
  const int reps = std::stoi(arg(argc, argv, "--reps", "3"));
  const auto kind = memsafe::gp::parse_kernel(arg(argc, argv, "--kernel", "matern32"));

  const std::size_t b = n * std::size_t(rank) / std::size_t(ranks), e = n * std::size_t(rank + 1) / std::size_t(ranks);
  std::vector<double> X((e - b) * d), y(e - b), Z(m * d);
  for (std::size_t i = b; i < e; ++i) {
    double s = 0;
    for (std::size_t c = 0; c < d; ++c) s += X[(i - b) * d + c] = value_at(i, c, 1);
    y[i - b] = std::sin(3 * s / double(d)) + 0.1 * (value_at(i, 0, 2) - 0.5);
  }
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t c = 0; c < d; ++c) Z[i * d + c] = value_at(i, c, 3);
  memsafe::gp::hyperparameters h{kind, 1.0, std::vector<double>(d, 0.5), 0.1, 1e-6};
  const memsafe::gp::sgpr_options o{.budget = budget, .gradient = true, .threads = threads};

  std::vector<double> wall, comm, fwd, bwd;
  memsafe::mpi::sgpr_comm_stats cs;
  std::size_t peak = 0;
  double bound = 0;
  for (int r = 0; r <= reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = std::chrono::steady_clock::now();
    const auto res = memsafe::mpi::sgpr(MPI_COMM_WORLD, {X.data(), y.data(), e - b, d}, {Z.data(), m, d}, h, o);
    MPI_Barrier(MPI_COMM_WORLD);
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    cs = res.comm;
    peak = res.stats.peak_temp_bytes;
    bound = res.bound;
    if (r > 0) {
      wall.push_back(t);
      comm.push_back(cs.seconds);
      fwd.push_back(res.stats.seconds_forward);
      bwd.push_back(res.stats.seconds_backward);
    }
  }
  std::uint64_t peak_max = 0, bytes_max = 0;
  const std::uint64_t peak64 = peak, bytes64 = cs.bytes_reduced;
  MPI_Reduce(&peak64, &peak_max, 1, MPI_UINT64_T, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&bytes64, &bytes_max, 1, MPI_UINT64_T, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    const auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    std::printf("{\"suite\": \"mpi\", \"task\": \"sgpr\", \"ranks\": %d, \"threads_per_rank\": %u, \"n\": %zu, "
                "\"m\": %zu, \"d\": %zu, \"kernel\": \"%s\", \"budget\": %zu, \"reps\": %d, \"min_s\": %.4f, "
                "\"median_s\": %.4f, \"forward_median_s\": %.4f, \"backward_median_s\": %.4f, \"comm_median_s\": %.5f, "
                "\"comm_bytes_max_rank\": %llu, \"allreduce_calls\": %zu, \"peak_temp_bytes_max_rank\": %llu, "
                "\"bound\": %.10g, \"describe\": \"%s\"}\n",
                ranks, threads, n, m, d, memsafe::gp::kernel_name(kind), budget, reps,
                *std::min_element(wall.begin(), wall.end()), median(wall), median(fwd), median(bwd), median(comm),
                (unsigned long long)bytes_max, cs.allreduce_calls, (unsigned long long)peak_max, bound,
                cs.describe().c_str());
  }
  MPI_Finalize();
  return 0;
}
