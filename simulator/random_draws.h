// Random draws that give the same numbers on every platform for the same seed: the trace
// generator's source of randomness. std::mt19937_64's output sequence is fixed by the C++
// standard, but the std::*_distribution classes are not (libstdc++ and libc++ turn the same
// engine output into different values), so every draw here is an explicit inverse CDF of one
// 53-bit uniform. The only remaining platform dependence is std::log/std::pow rounding in the
// last bit; the generator rounds what it writes to milliseconds, so files match byte for byte
// unless a value lands within an ulp of a rounding boundary (about one value in 10^7).
// Threading: one owner (an engine has state).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace deepool::simulator {

class RandomDraws {
 public:
  explicit RandomDraws(uint64_t seed) : engine_(seed) {}

  // Uniform in [0, 1): the top 53 bits of one engine output.
  double Uniform01();
  // Exponential with the given rate (> 0): -ln(1 - u) / rate.
  double Exponential(double rate);
  // 10^x for x uniform in [low_exponent, high_exponent).
  double LogUniform10(double low_exponent, double high_exponent);
  // Pareto with shape alpha (> 0) truncated to [low, high] (0 < low < high).
  double BoundedPareto(double alpha, double low, double high);
  // An index drawn with probability weights[i] / sum(weights). `cumulative` is
  // CumulativeWeights(weights): prefix sums, computed once per distribution.
  size_t Weighted(const std::vector<double>& cumulative);
  // True with probability p.
  bool Bernoulli(double p) { return Uniform01() < p; }

 private:
  std::mt19937_64 engine_;
};

// Prefix sums of non-negative weights, for RandomDraws::Weighted.
std::vector<double> CumulativeWeights(const std::vector<double>& weights);

// Mean of 10^x for x uniform in [low_exponent, high_exponent): (b - a) / ln(b / a).
double LogUniform10Mean(double low_exponent, double high_exponent);
// Mean of BoundedPareto(alpha, low, high).
double BoundedParetoMean(double alpha, double low, double high);

}  // namespace deepool::simulator
