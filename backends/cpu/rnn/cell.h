// The forward pass of one direction of RNN, GRU and LSTM, shared by their forward kernels
// (rnn/forward.cc) and their backward-through-time kernels (rnn/grad.cc), which run it again
// recording what the backward pass needs (RecurrentTrace). One step code, so the gradient is
// the gradient of exactly the forward's arithmetic.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/dnnl_util.h"
#include "backends/rnn_attrs.h"

namespace omt::cpu {

// One activation applied in place to n values.
template <class T>
void apply_recurrent_activation(const RecurrentActivation& act, T* v, int64_t n) {
  const T a = static_cast<T>(act.alpha), b = static_cast<T>(act.beta);
  switch (act.kind) {
    case RecurrentActKind::kSigmoid:
      for (int64_t i = 0; i < n; ++i) v[i] = T(1) / (T(1) + std::exp(-v[i]));
      break;
    case RecurrentActKind::kTanh:
      for (int64_t i = 0; i < n; ++i) v[i] = std::tanh(v[i]);
      break;
    case RecurrentActKind::kRelu:
      for (int64_t i = 0; i < n; ++i) v[i] = v[i] > T(0) ? v[i] : T(0);
      break;
    case RecurrentActKind::kAffine:
      for (int64_t i = 0; i < n; ++i) v[i] = a * v[i] + b;
      break;
    case RecurrentActKind::kLeakyRelu:
      for (int64_t i = 0; i < n; ++i) v[i] = v[i] >= T(0) ? v[i] : a * v[i];
      break;
    case RecurrentActKind::kThresholdedRelu:
      for (int64_t i = 0; i < n; ++i) v[i] = v[i] > a ? v[i] : T(0);
      break;
    case RecurrentActKind::kScaledTanh:
      for (int64_t i = 0; i < n; ++i) v[i] = a * std::tanh(b * v[i]);
      break;
    case RecurrentActKind::kHardSigmoid:
      for (int64_t i = 0; i < n; ++i) v[i] = std::max(T(0), std::min(T(1), a * v[i] + b));
      break;
    case RecurrentActKind::kElu:
      for (int64_t i = 0; i < n; ++i) v[i] = v[i] >= T(0) ? v[i] : a * (std::exp(v[i]) - T(1));
      break;
    case RecurrentActKind::kSoftsign:
      for (int64_t i = 0; i < n; ++i) v[i] = v[i] / (T(1) + std::abs(v[i]));
      break;
    case RecurrentActKind::kSoftplus:
      for (int64_t i = 0; i < n; ++i) v[i] = std::log1p(std::exp(v[i]));
      break;
  }
}

// Clips n values to [-clip, clip] (no-op for clip <= 0), first copying them to `pre` when the
// backward pass needs the unclipped values (pre may be null).
template <class T>
void clip_recurrent(T* v, T* pre, int64_t n, float clip) {
  if (clip <= 0.f) return;
  const T c = static_cast<T>(clip);
  for (int64_t i = 0; i < n; ++i) {
    if (pre) pre[i] = v[i];
    v[i] = std::max(-c, std::min(c, v[i]));
  }
}

// [a, b, c] -> [b, a, c] (layout 1 <-> 0).
template <class T>
void swap01(const T* src, T* dst, int64_t a, int64_t b, int64_t c) {
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < b; ++j) std::memcpy(dst + (j * a + i) * c, src + (i * b + j) * c, sizeof(T) * c);
}

// One direction's operands in layout 0: X [seq, batch, in], this direction's W [G*hs, in],
// R [G*hs, hs], B [2*G*hs], P [3*hs], initial states [batch, hs] (null: absent).
template <class T>
struct RecurrentDirection {
  int64_t d = 0, seq = 0, batch = 0, in = 0, hs = 0, D = 1;
  bool rev = false;
  const RecurrentActivation* act = nullptr;  // this direction's activations
  const T *x = nullptr, *w = nullptr, *r = nullptr, *bias = nullptr, *peep = nullptr;
  const T *h0 = nullptr, *c0 = nullptr;
};

// Caller-owned buffers of one forward pass. gates [seq, batch, G*hs] ends holding the gates'
// values after their activations (at steps past a row's length: before them); h and c
// [batch, hs] end holding the last states; hr [batch, G*hs], rh [batch, hs], bias [G*hs] and
// tmp [hs] are scratch.
template <class T>
struct RecurrentBuffers {
  T *gates = nullptr, *h = nullptr, *c = nullptr, *hr = nullptr, *rh = nullptr, *bias = nullptr,
    *tmp = nullptr;
};

// What the backward pass keeps of the forward pass; null pointers are not kept.
template <class T>
struct RecurrentTrace {
  T* pre = nullptr;    // [seq, batch, G*hs]: pre-activations before the clip (clip > 0 only)
  T* hprev = nullptr;  // [seq, batch, hs]: the state entering step t
  T* cprev = nullptr;  // LSTM [seq, batch, hs]: the cell entering step t
  T* cnew = nullptr;   // LSTM [seq, batch, hs]: the cell leaving step t
  T* aux = nullptr;    // GRU [seq, batch, hs]: r*h_prev (lbr 0) or h_prev Rh^T + Rbh (lbr 1)
};

// Runs one direction: each step's states and, where y is not null, Y [seq, D, batch, hs]
// (rows past their sequence length are left as they are: the forward kernel zeroes Y first).
// Each direction does one GEMM for the input projection of all time steps, then per step one
// GEMM (two for GRU without linear_before_reset) for the recurrence.
template <class T>
void run_recurrent_direction(const RecurrentAttrs& a, RecurrentCell cell, const std::vector<int64_t>& lens,
                             const RecurrentDirection<T>& dir, const RecurrentBuffers<T>& buf, T* y,
                             const RecurrentTrace<T>& trace) {
  const int64_t seq = dir.seq, batch = dir.batch, hs = dir.hs, D = dir.D, gh = a.gates_ * hs;
  const bool lbr = a.lbr_;
  const float clip = a.clip_;
  const RecurrentActivation* act = dir.act;
  T* const gates = buf.gates;
  T* const h = buf.h;
  T* const c = buf.c;
  T* const hr = buf.hr;
  // Input projection of every step, plus the biases that sit outside the recurrence.
  gemm(false, true, seq * batch, gh, dir.in, T(1), dir.x, dir.in, dir.w, dir.in, T(0), gates, gh);
  const T* rbh = nullptr;  // GRU linear_before_reset: Rb of the h gate stays inside
  if (dir.bias) {
    T* b = buf.bias;
    for (int64_t j = 0; j < gh; ++j) b[j] = dir.bias[j] + dir.bias[gh + j];
    if (lbr) {
      rbh = dir.bias + gh + 2 * hs;
      for (int64_t j = 2 * hs; j < gh; ++j) b[j] = dir.bias[j];
    }
    for (int64_t i = 0; i < seq * batch; ++i)
      for (int64_t j = 0; j < gh; ++j) gates[i * gh + j] += b[j];
  }
  if (dir.h0) std::copy(dir.h0, dir.h0 + batch * hs, h);
  else std::fill(h, h + batch * hs, T(0));
  if (dir.c0) std::copy(dir.c0, dir.c0 + batch * hs, c);
  else std::fill(c, c + batch * hs, T(0));

  for (int64_t step = 0; step < seq; ++step) {
    const int64_t t = dir.rev ? seq - 1 - step : step;
    T* g = gates + t * batch * gh;
    T* p = trace.pre ? trace.pre + t * batch * gh : nullptr;
    if (trace.hprev) std::copy(h, h + batch * hs, trace.hprev + t * batch * hs);
    if (trace.cprev) std::copy(c, c + batch * hs, trace.cprev + t * batch * hs);
    if (cell == RecurrentCell::kGru && !lbr) {
      gemm(false, true, batch, 2 * hs, hs, T(1), h, hs, dir.r, hs, T(0), hr, gh);
    } else {
      gemm(false, true, batch, gh, hs, T(1), h, hs, dir.r, hs, T(0), hr, gh);
    }
    // GRU: r*h_prev or h_prev Rh^T + Rbh of every row, kept in the trace or in scratch.
    T* aux = cell == RecurrentCell::kGru ? (trace.aux ? trace.aux + t * batch * hs : buf.rh) : nullptr;
    if (cell == RecurrentCell::kGru) {
      // z and r gates for every row (the h gate of linear_before_reset=0 needs all of r).
      for (int64_t b = 0; b < batch; ++b) {
        T* gb = g + b * gh;
        const T* hb = hr + b * gh;
        for (int64_t j = 0; j < 2 * hs; ++j) gb[j] += hb[j];
        clip_recurrent(gb, p ? p + b * gh : nullptr, 2 * hs, clip);
        apply_recurrent_activation(act[0], gb, 2 * hs);
        if (lbr) {
          for (int64_t j = 0; j < hs; ++j) aux[b * hs + j] = hb[2 * hs + j] + (rbh ? rbh[j] : T(0));
        } else {
          for (int64_t j = 0; j < hs; ++j) aux[b * hs + j] = gb[hs + j] * h[b * hs + j];
        }
      }
      if (!lbr)
        gemm(false, true, batch, hs, hs, T(1), aux, hs, dir.r + 2 * hs * hs, hs, T(0), hr + 2 * hs, gh);
    }
    for (int64_t b = 0; b < batch; ++b) {
      if (t >= lens[b]) continue;  // past this sequence's end: Y stays as it is, state unchanged
      T* gb = g + b * gh;
      T* pb = p ? p + b * gh : nullptr;
      const T* hb = hr + b * gh;
      T* h_b = h + b * hs;
      if (cell == RecurrentCell::kRnn) {
        for (int64_t j = 0; j < hs; ++j) gb[j] += hb[j];
        clip_recurrent(gb, pb, hs, clip);
        apply_recurrent_activation(act[0], gb, hs);
        std::copy(gb, gb + hs, h_b);
      } else if (cell == RecurrentCell::kGru) {
        T* hg = gb + 2 * hs;
        if (lbr) {
          const T* ab = aux + b * hs;
          for (int64_t j = 0; j < hs; ++j) hg[j] += gb[hs + j] * ab[j];
        } else {
          for (int64_t j = 0; j < hs; ++j) hg[j] += hb[2 * hs + j];
        }
        clip_recurrent(hg, pb ? pb + 2 * hs : nullptr, hs, clip);
        apply_recurrent_activation(act[1], hg, hs);
        for (int64_t j = 0; j < hs; ++j) h_b[j] = (T(1) - gb[j]) * hg[j] + gb[j] * h_b[j];
      } else {
        for (int64_t j = 0; j < gh; ++j) gb[j] += hb[j];
        T* ig = gb;
        T* og = gb + hs;
        T* fg = gb + 2 * hs;
        T* cg = gb + 3 * hs;
        T* cb = c + b * hs;
        if (dir.peep)
          for (int64_t j = 0; j < hs; ++j) {
            ig[j] += dir.peep[j] * cb[j];
            fg[j] += dir.peep[2 * hs + j] * cb[j];
          }
        clip_recurrent(ig, pb, hs, clip);
        clip_recurrent(fg, pb ? pb + 2 * hs : nullptr, hs, clip);
        clip_recurrent(cg, pb ? pb + 3 * hs : nullptr, hs, clip);
        apply_recurrent_activation(act[0], ig, hs);
        if (a.input_forget_) {
          for (int64_t j = 0; j < hs; ++j) fg[j] = T(1) - ig[j];
        } else {
          apply_recurrent_activation(act[0], fg, hs);
        }
        apply_recurrent_activation(act[1], cg, hs);
        for (int64_t j = 0; j < hs; ++j) cb[j] = fg[j] * cb[j] + ig[j] * cg[j];
        if (dir.peep)
          for (int64_t j = 0; j < hs; ++j) og[j] += dir.peep[hs + j] * cb[j];
        clip_recurrent(og, pb ? pb + hs : nullptr, hs, clip);
        apply_recurrent_activation(act[0], og, hs);
        if (trace.cnew) std::copy(cb, cb + hs, trace.cnew + (t * batch + b) * hs);
        std::copy(cb, cb + hs, buf.tmp);
        apply_recurrent_activation(act[2], buf.tmp, hs);
        for (int64_t j = 0; j < hs; ++j) h_b[j] = og[j] * buf.tmp[j];
      }
      if (y) std::copy(h_b, h_b + hs, y + ((t * D + dir.d) * batch + b) * hs);
    }
  }
}

}  // namespace omt::cpu
