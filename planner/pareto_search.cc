// Series-parallel reduction over Pareto frontiers (see pareto_search.h and docs/planner.md).
//
// Every edge (a, b) of the reduced graph carries a table: for each choice i of a and j of b, the
// Pareto frontier of (time, GPU-time) over the choices of the nodes strictly between a and b,
// costs of those nodes and of all edges between them included, a's and b's own costs excluded.
// Two rules shrink the graph until one source-sink edge is left:
//   series:   a node m with one in-edge (a, m) and one out-edge (m, b) becomes the edge (a, b):
//             T[i][j] = prune( U_k  T1[i][k] (+) cost(m, k) (+) T2[k][j] )
//   parallel: two edges (a, b) become one: T[i][j] = prune( T1[i][j] (+) T2[i][j] )
// where (+) is the Minkowski sum of frontiers. Nodes are reduced in the caller's (topological)
// order, so on chains the tables stay one row wide (the source has one choice) and the
// reduction is the classic left-to-right dynamic program. The order depends only on the graph,
// so it is worked out once (the Schedule) and replayed by every pass.
//
// Speed. A "scalar" pass keeps one point per cell, the least w_time x time + w_gpu x GPU-time.
// The chord method over lambda (w_gpu with w_time = 1: the Lagrangian relaxation of the budget),
// started from the fastest and the leanest solutions, yields a feasible solution (the
// incumbent) and the best Lagrangian lower bound in a handful of passes. Scalar passes also
// give, by a top-down pass over the steps, the exact least weighted cost of everything OUTSIDE
// each cell (the "outside" value, as in inside-outside algorithms); the three passes the bounds
// need, (1, 0), (0, 1) and (1, lambda*), are the ones the chord method ran, kept rather than
// run again. The exact Pareto pass then drops a partial solution (t, g) of cell c when
//     t + out_time[c] > target,   g + out_gpu[c] > budget,   or
//     t + lambda g + out_lambda[c] > target + lambda x budget,
// none of which can lose a solution with time <= target (the last holds for every lambda >= 0
// because the rest must fit in what the budget leaves). The passes' own cells hold the least
// inside values, so a cell whose inside plus outside already breaks a bound is skipped whole.
// Targets start just above the lower bound and double towards the incumbent until a pass finds
// a solution: small targets keep the frontiers tiny. Where the incumbent's target leaves at most
// four times as many cells alive as the smallest, one pass at the incumbent's target does instead.
// A pass stops as soon as one table is left empty (every table feeds the last).
//
// Scalar passes (pareto_scalar_pass.h) write flat structure-of-arrays tables (a weight and a
// choice per cell), and a Pareto pass keeps its frontiers in one arena, so passes allocate next
// to nothing.
#include "planner/pareto_search.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>

#include "planner/pareto_scalar_pass.h"
#include "planner/series_parallel_schedule.h"

namespace deepool::planner {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
constexpr double kRelativeSlack = 1e-9;   // floating-point slack on the bounds
constexpr double kRoundingSlack = 1e-12;  // between sums of the same costs in other orders
// The chord method ends in a few steps on real problems; the cap only guards degenerate ones.
constexpr int kMaxChordSteps = 64;

using series_parallel::BuildSchedule;
using series_parallel::ChosenCell;
using series_parallel::NodeTable;
using series_parallel::RunScalarPass;
using series_parallel::ScalarSolution;
using series_parallel::ScalarTables;
using series_parallel::ScalarWork;
using series_parallel::Schedule;
using series_parallel::Step;
using series_parallel::TableShape;

// ---------------------------------------------------------------------------------------------
// The exact Pareto pass.

struct Point {
  double time;
  double gpu;
  int32_t trace;  // index into the pass's traces, or -1 for no choices below
};

// How a frontier point was built: its two parts and, for a series step, the middle node's choice.
struct Trace {
  int32_t left;
  int32_t right;
  int32_t node;  // -1 for a parallel step
  int32_t choice;
};

struct Candidate {
  double time;
  double gpu;
  int32_t left;
  int32_t right;
  int32_t choice;
};

// Every frontier of one pass in one arena. Steps write their tables in the schedule's order,
// which is also the order of the flat cells, so cell c holds points[begin[c], begin[c + 1]) and
// the arena only grows during a pass. Kept between passes for its capacity: consumed tables are
// not freed, which costs memory of the order of the traces every pass keeps anyway.
struct ParetoWorkspace {
  std::vector<Point> points;
  std::vector<uint32_t> begin;
  std::vector<Trace> traces;
  std::vector<Candidate> scratch;
  std::vector<const Candidate*> kept;
};

// The least-time point of the final table's frontier in `workspace` within `budget_gpu_ms` (and
// the floating-point slack), traced back to every node's choice; not found where none is.
SeriesParallelSolution BestOfFinalFrontier(const ParetoWorkspace& workspace, size_t final_cell,
                                           size_t num_nodes, double budget_gpu_ms) {
  SeriesParallelSolution solution;
  solution.choices.assign(num_nodes, 0);
  const Point* best = nullptr;
  for (uint32_t p = workspace.begin[final_cell]; p < workspace.begin[final_cell + 1]; ++p) {
    const Point& point = workspace.points[p];
    if (point.gpu > budget_gpu_ms * (1 + kRelativeSlack)) continue;
    if (best == nullptr || point.time < best->time) best = &point;
  }
  if (best == nullptr) return solution;
  solution.found = true;
  solution.cost = CostPoint{best->time, best->gpu};
  std::vector<int32_t> stack{best->trace};
  while (!stack.empty()) {
    const int32_t id = stack.back();
    stack.pop_back();
    if (id < 0) continue;
    const Trace& trace = workspace.traces[static_cast<size_t>(id)];
    if (trace.node >= 0) solution.choices[static_cast<size_t>(trace.node)] = trace.choice;
    stack.push_back(trace.left);
    stack.push_back(trace.right);
  }
  return solution;
}

// Flat outside values for the three bounds, and per cell the least target at which any partial
// solution of the cell can pass them: its inside values (the scalar passes' own cells) are the
// least time, GPU-time and weighted cost a partial solution there can have. A pass skips the
// cells its target leaves dead; in a pass that finds nothing that is most of them.
struct Bounds {
  double lambda = 0;
  std::vector<double> time;          // weights (1, 0)
  std::vector<double> gpu;           // weights (0, 1)
  std::vector<double> weighted;      // weights (1, lambda)
  std::vector<double> least_target;  // infinity: dead at any target (over the budget)

  // Cells whose least target is at most this are alive at `target`. The passes' sums add the
  // same costs in other orders: allow for rounding.
  static double AliveUpTo(double target) {
    return target * (1 + kRelativeSlack) * (1 + kRoundingSlack);
  }
  size_t CountAlive(double target) const {
    const double up_to = AliveUpTo(target);
    return static_cast<size_t>(std::count_if(least_target.begin(), least_target.end(),
                                             [up_to](double least) { return least <= up_to; }));
  }

  // Fills the outside values of the three passes, (1, 0), (0, 1) and (1, lambda), by one
  // top-down walk over the steps. They do not depend on the budget.
  void FillOutside(const Schedule& schedule, const NodeTable& nodes, const ScalarTables& fastest,
                   const ScalarTables& leanest, const ScalarTables& at_lambda);
  // Then the least targets at `budget`.
  void FillLeastTargets(size_t total_cells, const ScalarTables& fastest,
                        const ScalarTables& leanest, const ScalarTables& at_lambda, double budget);
};

void Bounds::FillOutside(const Schedule& schedule, const NodeTable& nodes,
                         const ScalarTables& fastest, const ScalarTables& leanest,
                         const ScalarTables& at_lambda) {
  const ScalarTables* passes[3] = {&fastest, &leanest, &at_lambda};
  std::vector<double>* outsides[3] = {&time, &gpu, &weighted};
  for (std::vector<double>* outside : outsides) {
    outside->assign(schedule.total_cells, kInfinity);
    (*outside)[schedule.tables[static_cast<size_t>(schedule.final_table)].offset] = 0;
  }
  for (auto step = schedule.steps.rbegin(); step != schedule.steps.rend(); ++step) {
    if (step->kind == Step::kLeaf) continue;
    const TableShape& shape = schedule.tables[static_cast<size_t>(step->result)];
    const TableShape& first = schedule.tables[static_cast<size_t>(step->first)];
    const TableShape& second = schedule.tables[static_cast<size_t>(step->second)];
    if (step->kind == Step::kParallel) {
      for (int w = 0; w < 3; ++w) {
        std::vector<double>& outside = *outsides[w];
        const ScalarTables& inside = *passes[w];
        for (size_t c = 0; c < static_cast<size_t>(shape.cells()); ++c) {
          const double outer = outside[shape.offset + c];
          outside[first.offset + c] = outer + inside.weight[second.offset + c];
          outside[second.offset + c] = outer + inside.weight[first.offset + c];
        }
      }
      continue;
    }
    // Series: the rest of (a, b) seen from (a, m) is m's cost and (m, b), and the other way.
    // An unusable middle choice is infinite in every pass alike.
    const size_t middle = nodes.offset[static_cast<size_t>(step->node)];
    const int choices =
        static_cast<int>(nodes.offset[static_cast<size_t>(step->node) + 1] - middle);
    for (int i = 0; i < shape.rows; ++i) {
      for (int j = 0; j < shape.cols; ++j) {
        const size_t cell = shape.offset + static_cast<size_t>(i * shape.cols + j);
        const double outer[3] = {time[cell], gpu[cell], weighted[cell]};
        if (std::isinf(outer[0]) && std::isinf(outer[1]) && std::isinf(outer[2])) continue;
        for (int k = 0; k < choices; ++k) {
          if (std::isinf(fastest.node_weight[middle + static_cast<size_t>(k)])) continue;
          const size_t left = first.offset + static_cast<size_t>(i * first.cols + k);
          const size_t right = second.offset + static_cast<size_t>(k * second.cols + j);
          for (int w = 0; w < 3; ++w) {
            std::vector<double>& outside = *outsides[w];
            const ScalarTables& inside = *passes[w];
            const double node = inside.node_weight[middle + static_cast<size_t>(k)];
            outside[left] = std::min(outside[left], outer[w] + node + inside.weight[right]);
            outside[right] = std::min(outside[right], outer[w] + node + inside.weight[left]);
          }
        }
      }
    }
  }
}

void Bounds::FillLeastTargets(size_t total_cells, const ScalarTables& fastest,
                              const ScalarTables& leanest, const ScalarTables& at_lambda,
                              double budget) {
  least_target.resize(total_cells);
  for (size_t c = 0; c < total_cells; ++c) {
    least_target[c] = leanest.weight[c] + gpu[c] > budget
                          ? kInfinity
                          : std::max(fastest.weight[c] + time[c],
                                     at_lambda.weight[c] + weighted[c] - lambda * budget);
  }
}

class ParetoPass {
 public:
  ParetoPass(const SeriesParallelProblem& problem, const Schedule& schedule, const NodeTable& nodes,
             const Bounds& bounds, double target, ParetoWorkspace* workspace)
      : problem_(problem),
        schedule_(schedule),
        nodes_(nodes),
        bounds_(bounds),
        target_(target),
        workspace_(*workspace),
        points_(workspace->points),
        begin_(workspace->begin),
        traces_(workspace->traces),
        scratch_(workspace->scratch),
        kept_(workspace->kept) {}

  SeriesParallelSolution Run() {
    const double steps = static_cast<double>(schedule_.steps.size());
    window_ = problem_.tolerance_gpu_ms / std::max(1.0, steps);
    alive_up_to_ = Bounds::AliveUpTo(target_);
    points_.clear();
    traces_.clear();
    begin_.resize(schedule_.total_cells + 1);
    begin_[0] = 0;
    SeriesParallelSolution solution;
    for (const Step& step : schedule_.steps) {
      const TableShape& shape = schedule_.tables[static_cast<size_t>(step.result)];
      if (step.kind == Step::kLeaf) {
        const auto& edge = problem_.edges[static_cast<size_t>(step.edge)];
        for (size_t c = 0; c < edge.cells.size(); ++c) {
          if (Alive(shape.offset + c)) {
            points_.push_back(Point{edge.cells[c].time_ms, edge.cells[c].gpu_ms, -1});
          }
          begin_[shape.offset + c + 1] = static_cast<uint32_t>(points_.size());
        }
        continue;
      }
      if (step.kind == Step::kParallel) {
        Parallel(step, shape);
      } else {
        Series(step, shape);
      }
      // Every table feeds the final one: an empty table leaves nothing to find.
      if (points_.size() == begin_[shape.offset]) {
        solution.max_frontier = max_frontier_;
        solution.choices.assign(problem_.node_costs.size(), 0);
        return solution;
      }
    }
    completed_ = true;
    const size_t final_cell = schedule_.tables[static_cast<size_t>(schedule_.final_table)].offset;
    solution = BestOfFinalFrontier(workspace_, final_cell, problem_.node_costs.size(),
                                   problem_.budget_gpu_ms);
    solution.max_frontier = max_frontier_;
    return solution;
  }

  // Whether Run reduced the graph to its final table (it stops early at an empty table).
  bool completed() const { return completed_; }

 private:
  struct Limit {
    double time;
    double gpu;
    double weighted;  // on time + lambda x gpu
  };

  bool Alive(size_t cell) const { return bounds_.least_target[cell] <= alive_up_to_; }
  const Point* Begin(size_t cell) const { return points_.data() + begin_[cell]; }
  const Point* End(size_t cell) const { return points_.data() + begin_[cell + 1]; }

  Limit Limits(size_t cell) const {
    const double target = target_ * (1 + kRelativeSlack);
    const double budget = problem_.budget_gpu_ms * (1 + kRelativeSlack);
    return Limit{target - bounds_.time[cell], budget - bounds_.gpu[cell],
                 target + bounds_.lambda * budget - bounds_.weighted[cell]};
  }

  void Consider(double time, double gpu, const Limit& limit, int32_t left, int32_t right,
                int32_t choice) {
    if (gpu > limit.gpu || time > limit.time || time + bounds_.lambda * gpu > limit.weighted) {
      return;
    }
    scratch_.push_back(Candidate{time, gpu, left, right, choice});
  }

  void Parallel(const Step& step, const TableShape& shape) {
    const size_t first = schedule_.tables[static_cast<size_t>(step.first)].offset;
    const size_t second = schedule_.tables[static_cast<size_t>(step.second)].offset;
    for (size_t c = 0; c < static_cast<size_t>(shape.cells()); ++c) {
      scratch_.clear();
      if (Alive(shape.offset + c) && Begin(first + c) != End(first + c) &&
          Begin(second + c) != End(second + c)) {
        const Limit limit = Limits(shape.offset + c);
        for (const Point* p = Begin(first + c); p != End(first + c); ++p) {
          if (p->gpu > limit.gpu) break;
          for (const Point* q = Begin(second + c); q != End(second + c); ++q) {
            if (p->gpu + q->gpu > limit.gpu) break;
            Consider(p->time + q->time, p->gpu + q->gpu, limit, p->trace, q->trace, 0);
          }
        }
      }
      Prune(-1, shape.offset + c);
    }
  }

  void Series(const Step& step, const TableShape& shape) {
    const TableShape& first = schedule_.tables[static_cast<size_t>(step.first)];
    const TableShape& second = schedule_.tables[static_cast<size_t>(step.second)];
    const size_t middle = nodes_.offset[static_cast<size_t>(step.node)];
    const int choices =
        static_cast<int>(nodes_.offset[static_cast<size_t>(step.node) + 1] - middle);
    for (int i = 0; i < shape.rows; ++i) {
      for (int j = 0; j < shape.cols; ++j) {
        const size_t cell = shape.offset + static_cast<size_t>(i * shape.cols + j);
        scratch_.clear();
        if (!Alive(cell)) {
          begin_[cell + 1] = static_cast<uint32_t>(points_.size());
          continue;
        }
        bool limited = false;
        Limit limit{};
        for (int k = 0; k < choices; ++k) {
          const CostPoint& node = nodes_.costs[middle + static_cast<size_t>(k)];
          const size_t left = first.offset + static_cast<size_t>(i * first.cols + k);
          const size_t right = second.offset + static_cast<size_t>(k * second.cols + j);
          if (std::isinf(node.time_ms) || Begin(left) == End(left) || Begin(right) == End(right)) {
            continue;
          }
          if (!limited) {
            limit = Limits(cell);
            limited = true;
          }
          for (const Point* p = Begin(left); p != End(left); ++p) {
            const double gpu_left = p->gpu + node.gpu_ms;
            if (gpu_left > limit.gpu) break;
            const double time_left = p->time + node.time_ms;
            for (const Point* q = Begin(right); q != End(right); ++q) {
              if (gpu_left + q->gpu > limit.gpu) break;
              Consider(time_left + q->time, gpu_left + q->gpu, limit, p->trace, q->trace, k);
            }
          }
        }
        Prune(step.node, cell);
      }
    }
  }

  // Appends a bounded Pareto frontier of scratch_ to the arena as `cell`'s frontier.
  void Prune(int node, size_t cell) {
    if (scratch_.size() > 1) {
      std::sort(scratch_.begin(), scratch_.end(), [](const Candidate& a, const Candidate& b) {
        return a.gpu != b.gpu ? a.gpu < b.gpu : a.time < b.time;
      });
    }
    // Sweep by GPU-time: drop dominated points; within a window of width window_ above the
    // point that opened it keep only the fastest (it dominates the others up to window_).
    kept_.clear();
    double anchor = -kInfinity;
    for (const Candidate& candidate : scratch_) {
      if (!kept_.empty() && candidate.time >= kept_.back()->time) continue;
      if (!kept_.empty() && candidate.gpu <= anchor + window_) {
        kept_.back() = &candidate;
      } else {
        kept_.push_back(&candidate);
        anchor = candidate.gpu;
      }
    }
    for (const Candidate* candidate : kept_) {
      int32_t trace = -1;
      if (candidate->left >= 0 || candidate->right >= 0 || node >= 0) {
        trace = static_cast<int32_t>(traces_.size());
        traces_.push_back(Trace{candidate->left, candidate->right, node, candidate->choice});
      }
      points_.push_back(Point{candidate->time, candidate->gpu, trace});
    }
    begin_[cell + 1] = static_cast<uint32_t>(points_.size());
    max_frontier_ = std::max<int64_t>(max_frontier_, static_cast<int64_t>(kept_.size()));
  }

  const SeriesParallelProblem& problem_;
  const Schedule& schedule_;
  const NodeTable& nodes_;
  const Bounds& bounds_;
  const double target_;
  double window_ = 0;
  double alive_up_to_ = 0;
  bool completed_ = false;
  const ParetoWorkspace& workspace_;
  std::vector<Point>& points_;
  std::vector<uint32_t>& begin_;
  std::vector<Trace>& traces_;
  std::vector<Candidate>& scratch_;
  std::vector<const Candidate*>& kept_;
  int64_t max_frontier_ = 0;
};

// The buffers of one solve, kept per thread between solves. A solve's tables and frontiers are
// hundreds of kilobytes: allocated afresh each time, glibc maps and unmaps them (or trims the
// heap) on every call, and the page faults cost a large share of a sub-millisecond plan. Every
// pass overwrites what it reads, so nothing carries over from one solve to the next.
// One scalar pass at (w_time, w_gpu): its final weight and solution, and its tables while one
// of the scratch's buffers still holds them (null once another pass has overwritten them).
struct ScalarPass {
  double w_time = 0;
  double w_gpu = 0;
  bool break_ties_by_gpu = false;
  double final_weight = 0;
  SeriesParallelSolution solution;
  const ScalarTables* tables = nullptr;
};

struct SolveScratch {
  // The passes of the problem of memo `memo_id`, the first `passes_used` of `passes` (the rest
  // are buffers kept for their capacity); pointers to them stay valid as passes are added.
  uint64_t memo_id = 0;
  std::vector<std::unique_ptr<ScalarPass>> passes;
  size_t passes_used = 0;
  // The tables the bounds read: the fastest and leanest passes', and the chord method's in two
  // buffers, so that a trial never overwrites the pass at the best lambda so far.
  ScalarTables fastest_tables, leanest_tables, chord_tables[2];
  // The Pareto passes' bounds, with the outside values of the pass at `bounds_at` (one of
  // `passes`), kept for a solve again at another budget; null: none.
  Bounds bounds;
  const ScalarPass* bounds_at = nullptr;
  ScalarWork work;  // every pass's choices, until its solution is read
  std::vector<ChosenCell> chosen_cells;
  ParetoWorkspace workspace;
  // The Pareto pass whose frontiers `workspace` holds: of which memo's problem, at which budget,
  // and whether it reached the final table (RunParetoPasses reads its final frontier again).
  uint64_t pareto_memo_id = 0;
  double pareto_budget_gpu_ms = 0;
  bool pareto_completed = false;
};

Status CheckProblem(const SeriesParallelProblem& problem) {
  const size_t nodes = problem.node_costs.size();
  if (nodes < 2) return InvalidArgumentError("the problem needs a source and a sink");
  for (int terminal : {SeriesParallelProblem::kSource, SeriesParallelProblem::kSink}) {
    if (problem.node_costs[static_cast<size_t>(terminal)].size() != 1) {
      return InvalidArgumentError("the source and sink must have exactly one choice");
    }
  }
  for (size_t n = 0; n < nodes; ++n) {
    const auto& costs = problem.node_costs[n];
    if (std::none_of(costs.begin(), costs.end(),
                     [](const CostPoint& c) { return !std::isinf(c.time_ms); })) {
      return InvalidArgumentError("node '" + std::string(problem.node_names.at(n)) +
                                  "' has no usable choice");
    }
  }
  return Status::Ok();
}

// The iteration-time targets of the exact Pareto passes, in order. They double from gap / 64
// above the lower bound up to the incumbent: a pass that fails at a small target is cheap, and
// the first that succeeds sits at most twice as far above the lower bound as the optimum does
// (or at gap / 64).
std::vector<double> ParetoTargets(const Bounds& bounds, double lower_bound, double incumbent) {
  const double gap = incumbent - lower_bound;
  std::vector<double> targets;
  for (double fraction = 1.0 / 64; fraction < 1; fraction *= 2) {
    targets.push_back(lower_bound + fraction * gap);
  }
  targets.push_back(incumbent);
  // Small targets pay where the frontiers would grow large. Where the incumbent's target leaves
  // at most four times as many cells alive as the smallest one, one pass at the incumbent's
  // target costs less than the ladder's (usually failing) smaller ones together: on the zoo
  // models the frontiers stay a point or two per alive cell there. (At twice, Inception-v3's
  // solves ran the whole ladder of seven passes to find the incumbent optimal; at four, no
  // zoo plan measured took more instructions and none changed.)
  if (bounds.CountAlive(incumbent) <= 4 * bounds.CountAlive(targets.front())) {
    targets = {incumbent};
  }
  return targets;
}

SolveScratch& ThreadSolveScratch() {
  thread_local SolveScratch scratch;
  return scratch;
}

// What every step of one solve reads: the problem, its schedule and flat node costs, the cell
// of the final table and the budget with its floating-point slack.
struct SolveContext {
  const SeriesParallelProblem& problem;
  const Schedule& schedule;
  const NodeTable& nodes;
  size_t final_cell;
  double budget;
  uint64_t memo_id;
};

// Runs `pass` into `into` (a buffer of the scratch): the pass whose tables were there loses them.
void RunPassInto(const SolveContext& context, ScalarPass* pass, ScalarTables* into,
                 SolveScratch* scratch) {
  for (size_t p = 0; p < scratch->passes_used; ++p) {
    if (scratch->passes[p]->tables == into) scratch->passes[p]->tables = nullptr;
  }
  RunScalarPass(context.problem, context.schedule, context.nodes, pass->w_time, pass->w_gpu,
                pass->break_ties_by_gpu, into, &scratch->work);
  pass->final_weight = into->weight[context.final_cell];
  pass->solution = ScalarSolution(context.problem, context.schedule, context.nodes, *into,
                                  scratch->work, &scratch->chosen_cells);
  pass->tables = into;
}

// The scalar pass at (w_time, w_gpu) of the memo's problem: run once (into `into`), then found
// again.
ScalarPass& PassAt(const SolveContext& context, double w_time, double w_gpu, bool break_ties_by_gpu,
                   ScalarTables* into, SolveScratch* scratch) {
  for (size_t p = 0; p < scratch->passes_used; ++p) {
    ScalarPass& pass = *scratch->passes[p];
    if (pass.w_time == w_time && pass.w_gpu == w_gpu &&
        pass.break_ties_by_gpu == break_ties_by_gpu) {
      return pass;
    }
  }
  if (scratch->passes_used == scratch->passes.size()) {
    scratch->passes.push_back(std::make_unique<ScalarPass>());
  }
  ScalarPass& pass = *scratch->passes[scratch->passes_used++];
  pass.w_time = w_time;
  pass.w_gpu = w_gpu;
  pass.break_ties_by_gpu = break_ties_by_gpu;
  pass.tables = nullptr;
  RunPassInto(context, &pass, into, scratch);
  return pass;
}

// The tables of `pass`, run again into `into` where another pass has overwritten them.
const ScalarTables& TablesOf(const SolveContext& context, ScalarPass* pass, ScalarTables* into,
                             SolveScratch* scratch) {
  if (pass->tables == nullptr) RunPassInto(context, pass, into, scratch);
  return *pass->tables;
}

// The state of the Lagrangian relaxation: the best feasible solution so far, the best lower
// bound on the optimum's time, and the lambda (and its pass's tables) that gave the bound.
struct Relaxation {
  SeriesParallelSolution best;
  double lower_bound = 0;
  double best_lambda = 0;
  ScalarPass* at_best_lambda = nullptr;
  ScalarPass* fastest = nullptr;  // the passes at (1, 0) and (0, 1)
  ScalarPass* leanest = nullptr;

  // The bound meets the best solution: it is optimal.
  bool GapClosed() const {
    return best.cost.time_ms - lower_bound <= kRelativeSlack * best.cost.time_ms;
  }
};

// Lagrangian relaxation: the solution of a scalar pass at lambda is optimal for its own
// GPU-time, so a feasible one is a candidate, and min(time + lambda x gpu) - lambda x budget
// bounds the optimum below. The best lambda is found by the chord (Newton) method on the lower
// convex hull of the solutions' (gpu, time): start from the fastest solution (`over` the budget)
// and the leanest (`relaxation->best`, within it); the lambda at which both weigh the same finds
// a hull point strictly below their chord, which replaces the end on its side of the budget, or
// none, and then the two are neighbours on the hull and that lambda maximises the bound.
void RunChordMethod(const SolveContext& context, CostPoint over, SolveScratch* scratch,
                    Relaxation* relaxation) {
  Relaxation& r = *relaxation;
  CostPoint within = r.best.cost;
  for (int step = 0; step < kMaxChordSteps && !r.GapClosed() && over.gpu_ms > within.gpu_ms;
       ++step) {
    const double lambda = (within.time_ms - over.time_ms) / (over.gpu_ms - within.gpu_ms);
    if (!(lambda > 0) || std::isinf(lambda)) break;
    // Into the chord buffer that does not hold the pass at the best lambda so far.
    ScalarTables* into = r.at_best_lambda->tables == &scratch->chord_tables[0]
                             ? &scratch->chord_tables[1]
                             : &scratch->chord_tables[0];
    ScalarPass& trial = PassAt(context, 1, lambda, /*break_ties_by_gpu=*/false, into, scratch);
    const double weight = trial.final_weight;
    if (std::isinf(weight)) break;
    const CostPoint found = trial.solution.cost;
    const bool fits = found.gpu_ms <= context.budget;
    if (fits && found.time_ms < r.best.cost.time_ms) r.best = trial.solution;
    const double bound = weight - lambda * context.problem.budget_gpu_ms;
    if (bound > r.lower_bound) {
      r.lower_bound = bound;
      r.best_lambda = lambda;
      r.at_best_lambda = &trial;  // for the bounds of the Pareto passes
    }
    const double chord = over.time_ms + lambda * over.gpu_ms;
    if (weight >= chord - kRelativeSlack * chord) break;  // no hull point below the chord
    (fits ? within : over) = found;
  }
}

// Exact Pareto passes, pruned with the outside values of the three scalar passes the
// relaxation kept, for growing targets: the first solution faster than the relaxation's best,
// or that best.
SeriesParallelSolution RunParetoPasses(const SolveContext& context, Relaxation relaxation,
                                       SolveScratch* scratch) {
  const double incumbent =
      std::min(relaxation.best.cost.time_ms, context.problem.incumbent_time_ms);
  // Solved again below the budget of the memo's last Pareto pass: that pass kept every solution
  // within its budget no slower than its target (the bounds drop none), so the fastest point of
  // its final frontier within this budget, when there is one, is the optimum here too (any
  // solution it lacks is slower than its target); only where there is none does a pass run.
  // With a tolerance, the windows that pass formed over its own budget may have kept a point just
  // above this one in place of one within it: the answer is then epsilon-optimal, as a pass's.
  if (scratch->pareto_memo_id == context.memo_id && scratch->pareto_completed &&
      context.problem.budget_gpu_ms < scratch->pareto_budget_gpu_ms) {
    SeriesParallelSolution kept =
        BestOfFinalFrontier(scratch->workspace, context.final_cell,
                            context.problem.node_costs.size(), context.problem.budget_gpu_ms);
    if (kept.found) {
      return kept.cost.time_ms < relaxation.best.cost.time_ms ? std::move(kept)
                                                              : std::move(relaxation.best);
    }
  }
  const ScalarTables& fastest =
      TablesOf(context, relaxation.fastest, &scratch->fastest_tables, scratch);
  const ScalarTables& leanest =
      TablesOf(context, relaxation.leanest, &scratch->leanest_tables, scratch);
  const ScalarTables& at_lambda =
      TablesOf(context, relaxation.at_best_lambda, &scratch->chord_tables[0], scratch);
  Bounds& bounds = scratch->bounds;
  if (scratch->bounds_at != relaxation.at_best_lambda) {
    bounds.lambda = relaxation.best_lambda;
    bounds.FillOutside(context.schedule, context.nodes, fastest, leanest, at_lambda);
    scratch->bounds_at = relaxation.at_best_lambda;
  }
  bounds.FillLeastTargets(context.schedule.total_cells, fastest, leanest, at_lambda,
                          context.budget);
  for (double target : ParetoTargets(bounds, relaxation.lower_bound, incumbent)) {
    ParetoPass pass(context.problem, context.schedule, context.nodes, bounds, target,
                    &scratch->workspace);
    SeriesParallelSolution pareto = pass.Run();
    scratch->pareto_memo_id = context.memo_id;
    scratch->pareto_budget_gpu_ms = context.problem.budget_gpu_ms;
    scratch->pareto_completed = pass.completed();
    if (pareto.found && pareto.cost.time_ms < relaxation.best.cost.time_ms) return pareto;
  }
  return std::move(relaxation.best);
}

// The least-time solution within the budget, before the incumbent is taken into account; the
// scalar passes are those of `memo_id`'s problem where the thread's scratch still holds them.
SeriesParallelSolution SolveWithinBudget(const SolveContext& context) {
  SolveScratch& scratch = ThreadSolveScratch();
  if (scratch.memo_id != context.memo_id) {
    scratch.memo_id = context.memo_id;
    scratch.passes_used = 0;
    scratch.bounds_at = nullptr;
  }
  scratch.chosen_cells.reserve(2 * context.schedule.steps.size() + 1);
  // The fastest solution regardless of GPU-time (of equally fast ones, the leanest); optimal
  // when it fits the budget.
  ScalarPass& fastest =
      PassAt(context, 1, 0, /*break_ties_by_gpu=*/true, &scratch.fastest_tables, &scratch);
  if (!fastest.solution.found || fastest.solution.cost.gpu_ms <= context.budget) {
    return fastest.solution;
  }
  // The least GPU-time: when even that does not fit, nothing does.
  ScalarPass& leanest =
      PassAt(context, 0, 1, /*break_ties_by_gpu=*/false, &scratch.leanest_tables, &scratch);
  if (!(leanest.solution.cost.gpu_ms <= context.budget)) return SeriesParallelSolution{};
  Relaxation relaxation;
  relaxation.best = leanest.solution;
  relaxation.fastest = &fastest;
  relaxation.leanest = &leanest;
  relaxation.lower_bound = fastest.final_weight;
  relaxation.at_best_lambda = &fastest;
  RunChordMethod(context, fastest.solution.cost, &scratch, &relaxation);
  if (relaxation.GapClosed()) return std::move(relaxation.best);  // proved optimal
  return RunParetoPasses(context, std::move(relaxation), &scratch);
}

// SolveSeriesParallel once the problem is checked and its schedule made.
SeriesParallelSolution SolveChecked(const SeriesParallelProblem& problem, const Schedule& schedule,
                                    const ScalarPassMemo& memo) {
  const NodeTable node_table(problem);
  const size_t final_cell = schedule.tables[static_cast<size_t>(schedule.final_table)].offset;
  const SolveContext context{
      problem,  schedule, node_table, final_cell, problem.budget_gpu_ms * (1 + kRelativeSlack),
      memo.id()};
  SeriesParallelSolution solution = SolveWithinBudget(context);
  // Only a solution that beats the caller's incumbent counts as found.
  solution.found = solution.found && solution.cost.time_ms < problem.incumbent_time_ms;
  return solution;
}

}  // namespace

ScalarPassMemo::ScalarPassMemo() {
  // Ids only tell memos apart on a thread: one counter per thread, starting above the scratch's 0.
  thread_local uint64_t last_id = 0;
  id_ = ++last_id;
}

StatusOr<SeriesParallelSolution> SolveSeriesParallel(const SeriesParallelProblem& problem) {
  RETURN_IF_ERROR(CheckProblem(problem));
  ASSIGN_OR_RETURN(const Schedule schedule, BuildSchedule(problem));
  return SolveChecked(problem, schedule, ScalarPassMemo());
}

StatusOr<SeriesParallelSolution> SolveSeriesParallel(const SeriesParallelProblem& problem,
                                                     const Schedule& schedule) {
  return SolveSeriesParallel(problem, schedule, ScalarPassMemo());
}

StatusOr<SeriesParallelSolution> SolveSeriesParallel(const SeriesParallelProblem& problem,
                                                     const Schedule& schedule,
                                                     const ScalarPassMemo& memo) {
  RETURN_IF_ERROR(CheckProblem(problem));
  const auto leaves = std::count_if(schedule.steps.begin(), schedule.steps.end(),
                                    [](const Step& step) { return step.kind == Step::kLeaf; });
  const auto series = std::count_if(schedule.steps.begin(), schedule.steps.end(),
                                    [](const Step& step) { return step.kind == Step::kSeries; });
  // Every node but the source and sink is reduced in series once.
  if (static_cast<size_t>(leaves) != problem.edges.size() ||
      static_cast<size_t>(series) + 2 != problem.node_costs.size() || schedule.final_table < 0) {
    return InvalidArgumentError("the schedule was made for a problem of another shape");
  }
  return SolveChecked(problem, schedule, memo);
}

}  // namespace deepool::planner
