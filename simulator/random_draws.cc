#include "simulator/random_draws.h"

#include <algorithm>
#include <cmath>

namespace deepool::simulator {

double RandomDraws::Uniform01() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

double RandomDraws::Exponential(double rate) { return -std::log1p(-Uniform01()) / rate; }

double RandomDraws::LogUniform10(double low_exponent, double high_exponent) {
  return std::pow(10.0, low_exponent + (high_exponent - low_exponent) * Uniform01());
}

double RandomDraws::BoundedPareto(double alpha, double low, double high) {
  // Inverse of F(x) = (1 - (low/x)^alpha) / (1 - (low/high)^alpha) on [low, high].
  const double u = Uniform01();
  const double tail = 1.0 - std::pow(low / high, alpha);
  return std::min(high, low / std::pow(1.0 - u * tail, 1.0 / alpha));
}

size_t RandomDraws::Weighted(const std::vector<double>& cumulative) {
  const double target = Uniform01() * cumulative.back();
  // The first prefix sum above the target; weight-0 entries are never chosen.
  const auto found = std::upper_bound(cumulative.begin(), cumulative.end(), target);
  return std::min<size_t>(static_cast<size_t>(found - cumulative.begin()), cumulative.size() - 1);
}

std::vector<double> CumulativeWeights(const std::vector<double>& weights) {
  std::vector<double> cumulative(weights.size());
  double sum = 0;
  for (size_t i = 0; i < weights.size(); ++i) cumulative[i] = sum += weights[i];
  return cumulative;
}

double LogUniform10Mean(double low_exponent, double high_exponent) {
  const double a = std::pow(10.0, low_exponent);
  const double b = std::pow(10.0, high_exponent);
  return (b - a) / std::log(b / a);
}

double BoundedParetoMean(double alpha, double low, double high) {
  const double normaliser = 1.0 - std::pow(low / high, alpha);
  if (alpha == 1.0) return low * std::log(high / low) / normaliser;
  return alpha * std::pow(low, alpha) / (alpha - 1.0) *
         (std::pow(low, 1.0 - alpha) - std::pow(high, 1.0 - alpha)) / normaliser;
}

}  // namespace deepool::simulator
