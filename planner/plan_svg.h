// Draws a plan as an SVG picture: layers along x (topological order), devices along y, each
// cell shaded by the layer's time (forward + backward + communication) where the layer runs on
// that device and left blank where it does not, so the bursts stand out. Pure: returns text.
// Threading: a pure function.
#pragma once

#include <string>

#include "planner/plan.h"

namespace deepool::planner {

// Up to 128 device rows; beyond that each row stands for a band of consecutive ranks and is
// shaded in proportion to how many of them the layer uses.
std::string PlanToSvg(const Plan& plan);

}  // namespace deepool::planner
