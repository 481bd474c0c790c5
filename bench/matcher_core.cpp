// The matcher core timed without Python: load a JGF file, then allocate one
// jobspec (JSON) until the graph is full or `count` matches are made. Built
// with the gtests (fluxion_bench); meant for profilers such as
//   valgrind --tool=callgrind build-h/fluxion_bench c1000.json first node1x.json 100
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "matcher.hpp"

namespace {
std::string slurp(const char *path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}
double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

int main(int argc, char **argv) {
    if (argc < 5) {
        std::fprintf(stderr, "usage: %s GRAPH.json POLICY JOBSPEC.json COUNT [FORMAT [nomemo]]\n", argv[0]);
        return 2;
    }
    std::string jgf = slurp(argv[1]);
    std::string spec = slurp(argv[3]);
    int count = std::stoi(argv[4]);
    fluxion::MatcherOptions o;
    o.policy = argv[2];
    o.match_format = argc > 5 ? argv[5] : "rv1_nosched";
    // A 7th argument "nomemo" turns the subtree memos off, to compare.
    o.memos = !(argc > 6 && std::string(argv[6]) == "nomemo");
    auto t0 = std::chrono::steady_clock::now();
    fluxion::Matcher m(jgf, o);
    double load_ms = ms_since(t0);
    std::vector<double> ok;
    int failed = 0;
    for (int i = 0; i < count; ++i) {
        auto t = std::chrono::steady_clock::now();
        fluxion::MatchResult r = m.match(spec, "allocate");
        double ms = ms_since(t);
        if (r.status != "allocated") {
            failed++;
            break;
        }
        ok.push_back(ms);
    }
    std::sort(ok.begin(), ok.end());
    double p50 = ok.empty() ? 0 : ok[ok.size() / 2];
    double p99 = ok.empty() ? 0 : ok[std::min(ok.size() - 1, ok.size() * 99 / 100)];
    std::printf("load_ms %.1f ok %zu failed %d p50_ms %.4f p99_ms %.4f\n", load_ms, ok.size(), failed, p50, p99);
    return 0;
}
