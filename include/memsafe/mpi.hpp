// memsafe/mpi.hpp — opt-in: the same expressions evaluated over the ranks of an MPI communicator,
// each rank on its own shard under its own budget (target memsafe::mpi; docs/design.md, "MPI").
//
//   auto r = memsafe::mpi::eval(memsafe::argkmin(memsafe::sqdist(Q, Y_shard), 10), MPI_COMM_WORLD,
//                               memsafe::mpi::shard_reduced, memsafe::options{.budget = 64 << 20});
//   // r.indices: global indices into the concatenation of the ranks' Y shards, on every rank
//   auto mine = memsafe::mpi::eval(memsafe::mpi::argkmin(memsafe::sqdist(Q_shard, Y_shard), 10),
//                                  MPI_COMM_WORLD, memsafe::mpi::shard_both, o);
//   // queries and database both sharded (mpi/ring.hpp): this rank's queries' neighbours, global indices
#pragma once
#include "memsafe.hpp"
#include "mpi/eval.hpp"
