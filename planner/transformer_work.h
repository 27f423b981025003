// Roofline work of the token ops (embedding, position_embedding, multihead_attention) and the
// vision transformer's tensor ops (transpose, class_token, select, mean) for the analytical
// device model (device_model.h calls these from EstimateLayerWork). Per-op rules, at
// fp32 activations (other widths scale the activation bytes), with T tokens, D features, H heads, d
// = D / H, V rows of an embedding table, n samples:
//   embedding:  a gather. Forward reads n*T ids (8 bytes) and n*T rows of D, writes n*T*D; no
//               math, no GEMM. Backward scatter-adds the output gradient into a zeroed V x D
//               gradient (n*T*D adds) and accumulates it into .grad; nothing flows to the ids.
//   position_embedding: elementwise: out = x + weight[:T]. Backward passes the gradient through
//               and sums it over the batch into the [max_positions, D] table.
//   multihead_attention: GEMMs: the in-projection (2*T*D*3D, depth D) and out-projection
//               (2*T*D*D, depth D), modelled as one part of depth D; QK^T and AV (2*T*T*D each,
//               depth d and T), modelled as one part whose depth is their flop-weighted harmonic
//               mean, so that the depth term of the roofline is exact for both. Backward: twice
//               the projections (grad-input and grad-weight) and twice QK^T and AV (dQ, dK; dP,
//               dV). Softmax: with dropout 0 the runtime calls a fused SDPA kernel (flash or
//               memory-efficient attention), which keeps the H x T x T scores in on-chip memory
//               and recomputes them in backward (one more 2*T*T*D); modelled so, with no T x T
//               bytes. With dropout > 0 the runtime materialises scores and probabilities
//               (matmul, softmax, dropout, matmul), modelled as 4 forward and 6 backward passes
//               over H*T*T floats. Either way the flops grow with T*T.
//   transpose:  a copy (the runtime makes it contiguous): reads and writes the tensor each way.
//   class_token: a concatenation: forward writes [T+1, D] from the tokens and the [1, 1, D]
//               parameter; backward copies the tokens' slice of the gradient and sums the first
//               row over the batch into the parameter's gradient (accumulated into .grad).
//   select:     a view forward (one dispatch, no bytes); backward zero-fills the input's
//               gradient and copies the selected slice into it.
//   mean:       a reduction: reads the input, writes the output; backward broadcasts the scaled
//               gradient into the input's shape. One flop per input element each way.
// Threading: pure functions.
#pragma once

#include <cstdint>

#include "planner/device_model.h"
#include "planner/graph.h"

namespace deepool::planner {

// The work of graph layer `layer_id` (one of the token ops above) at `batch` samples, with
// activations and their gradients of `activation_bytes` per element (weights and their
// gradients stay fp32; token ids are int64). Other ops: an empty LayerWork.
LayerWork TransformerLayerWork(const Graph& graph, int layer_id, int64_t batch,
                               double activation_bytes = 4);

}  // namespace deepool::planner
