#pragma once
// The one CSV format of offsim's calibration benchmarks (bench/hip/README.md):
//   benchmark,device_kind,host,src,dst,memory,ranks,m,n,k,dtype,threads,bytes,elements,time_s
// One row per measurement; columns that do not apply are empty. time_s is the mean of the timed
// repetitions (warm-up excluded). `offsim calibrate` reads it.
#include <cstdint>
#include <cstdio>
#include <string>

namespace offsim::bench {

struct Row {
  std::string benchmark;  // h2d, d2h, peer, cpu_adam, gemm, all_gather, reduce_scatter, all_reduce
  std::string device_kind;
  std::string host;
  std::string src;
  std::string dst;
  std::string memory;  // pinned, pageable, device
  std::string ranks;
  std::string m, n, k, dtype;
  std::string threads;
  std::int64_t bytes = 0;
  std::int64_t elements = 0;
  double time_s = 0.0;
};

inline void print_header(std::FILE* out) {
  std::fprintf(out, "benchmark,device_kind,host,src,dst,memory,ranks,m,n,k,dtype,threads,bytes,elements,time_s\n");
}

inline void print_row(std::FILE* out, const Row& r) {
  std::fprintf(out, "%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%lld,%lld,%.9g\n", r.benchmark.c_str(), r.device_kind.c_str(),
               r.host.c_str(), r.src.c_str(), r.dst.c_str(), r.memory.c_str(), r.ranks.c_str(), r.m.c_str(),
               r.n.c_str(), r.k.c_str(), r.dtype.c_str(), r.threads.c_str(), static_cast<long long>(r.bytes),
               static_cast<long long>(r.elements), r.time_s);
  std::fflush(out);
}

}  // namespace offsim::bench
