"""The numba interpreter of packed models (``vpintegrator.rollout.numba_model`` packs them and documents the ops).

One ``@njit(cache=True)`` function, ``_rollout_rows``, runs an int64 op program (one row of
``OP_WIDTH`` integers per layer) over a flat float64 weight vector for many calls; the layouts of the
rows are those ``vpintegrator.rollout.numba_model.pack`` writes.
"""

from __future__ import annotations

import math

import numpy as np

try:  # numba is a dependency, but the package keeps working without it (torch runs the models then)
    import numba

    AVAILABLE = True
except ImportError:  # pragma: no cover - exercised only where numba is missing
    numba = None  # type: ignore[assignment]
    AVAILABLE = False

__all__ = ["AVAILABLE", "OP_WIDTH", "OP_RESIDUAL", "OP_VP_ATTENTION", "OP_MH_ATTENTION", "OP_LP_LAYER",
           "OP_LP_COUPLING", "OP_SYMP_LINEAR", "OP_SYMP_ACTIVATION", "OP_SYMP_GRADIENT", "OP_SYMP_ATTENTION",
           "OP_FEATURES", "OP_DENSE", "OP_GRU", "OP_LRU", "OP_INCREMENT", "ADD", "OP_POSITION_MIXING"]

OP_RESIDUAL, OP_VP_ATTENTION, OP_MH_ATTENTION, OP_LP_LAYER, OP_LP_COUPLING = 0, 1, 2, 3, 4
#: the symplectic shears (SympNet layers and symplectic attention): q ← q + f(p) or p ← p + f(q)
OP_SYMP_LINEAR, OP_SYMP_ACTIVATION, OP_SYMP_GRADIENT, OP_SYMP_ATTENTION = 5, 6, 7, 8
#: the window models' feature ops (recurrent and delay-vector networks, pred_window 1): they compute on a flat
#: feature vector and leave the next state in the window's first row
OP_FEATURES, OP_DENSE, OP_GRU, OP_LRU, OP_INCREMENT = 9, 10, 11, 12, 13
#: the VPT's positional "mixing": a linear shear across the window's positions
OP_POSITION_MIXING = 14
OP_WIDTH = 8
#: added to OP_DENSE's activation code: add the layer's output into its destination instead of writing it;
#: 8·LOWER or 8·UPPER more: W strictly lower or upper, in place (the rows in the order no row reads an updated one)
ADD = 4
#: activation name -> code in the kernel
ACTIVATIONS = {"identity": 0, "tanh": 1, "sigmoid": 2, "silu": 3}
#: OP_RESIDUAL matrix kinds: dense, strictly lower, strictly upper (the zero triangle is skipped)
DENSE, LOWER, UPPER = 0, 1, 2
#: OP_SYMP_ATTENTION softmax code: over all T² entries of C (GML MatrixSoftmax), over each column (VectorSoftmax)
SOFTMAXES = {"matrix_softmax": 0, "vector_softmax": 1}


def _njit(fn=None, **options):
    if fn is None:
        return lambda f: _njit(f, **options)
    if not AVAILABLE:
        return fn
    from .._jitcache import njit  # numba's cache, or a temporary one where it cannot write

    # error_model="numpy": a zero divisor gives inf or NaN, never a ZeroDivisionError (an exactly zero pivot of the
    # Cayley system at a blown-up window is the model's divergence, a non-finite rollout, not a crash)
    return njit(fn, nogil=True, error_model="numpy", **options)


# ---------------------------------------------------------------------------------------------- kernel
#
# One function body on purpose: numba increfs/decrefs every array handed to a helper (or rebound by an
# inlined one) at each call, ~5 ns apiece, which at ~1 µs per model call was a third of the time. Only
# scalar helpers remain.


@_njit
def _sigma(v, act):
    if act == 1:  # tanh(v) = t / (t + 2), t = expm1(2 v): 2 ulp, ~2x cheaper than libm's tanh here
        if v > 20.0:
            return 1.0
        if v < -20.0:
            return -1.0
        t = math.expm1(2.0 * v)
        return t / (t + 2.0)
    if act == 0:
        return v
    # sigmoid 1 / (1 + exp(−v)) as torch.sigmoid (exp overflow gives inf, 1/inf = 0: no exception)
    s = 1.0 / (1.0 + math.exp(-v))
    if act == 2:
        return s
    return v * s  # silu


@_njit
def _rollout_rows(ctx, n_calls, adv, params, ops, out):
    """Iterate the model ``n_calls`` times from each window ``ctx[r]`` (R, T, D), in numba.

    Each call maps the window to the prediction (T, D) (pred_window = seq_len) and keeps its first
    ``adv`` states (``adv = T``: non-overlapping windows, the prediction is the next window; ``adv = 1``:
    overlapping windows, the window advances by one state). ``out`` (R, ≥ n_calls·adv, D) receives the
    kept states; ``ctx`` is left holding each row's last window.
    """
    R, T, D = ctx.shape
    n_ops = ops.shape[0]
    x = np.empty((T, D))  # the window, transformed in place layer by layer
    win = np.empty((T, D))
    y = np.empty((T, D))
    tmp = np.empty(D)
    av = np.empty((T, D))
    lam = np.empty((T, T))
    gj = np.empty((T, 2 * T))
    qkv = np.empty((T, 3 * D))
    sc = np.empty(T)
    root_d = math.sqrt(D)
    n_feat = 0  # the feature vector of OP_FEATURES programs (its size is the op's field 1)
    for k in range(n_ops):
        if ops[k, 0] == 9 and ops[k, 1] > n_feat:
            n_feat = ops[k, 1]
    fv = np.empty(n_feat)
    for r in range(R):
        for t in range(T):
            for c in range(D):
                x[t, c] = ctx[r, t, c]
        pos = 0
        for _ in range(n_calls):
            if adv != T:
                for t in range(T):
                    for c in range(D):
                        win[t, c] = x[t, c]
            for k in range(n_ops):
                code = ops[k, 0]
                if code == 0:
                    # ---- OP_RESIDUAL: x_t ↦ x_t + σ(W x_t + b); kind 1/2: W strictly lower/upper; ops[k, 5] = 1:
                    # with the flow time τ = params[ops[k, 6]], x_t + τ σ(W x_t + b); = 2 (triangular W): that
                    # map's inverse by back-substitution, x_i = y_i − τ σ(W_i x + b_i) in the order of the
                    # components W_i reaches (first to last for lower, last to first for upper), in place
                    kind = ops[k, 1]
                    w_off = ops[k, 2]
                    b_off = ops[k, 3]
                    act = ops[k, 4]
                    timed = ops[k, 5]
                    tau = params[ops[k, 6]] if timed != 0 else 1.0
                    if timed == 2:
                        for t in range(T):
                            for ii in range(D):
                                i = ii if kind == 1 else D - 1 - ii
                                lo = 0
                                hi = i
                                if kind == 2:
                                    lo = i + 1
                                    hi = D
                                acc = 0.0
                                row = w_off + i * D
                                for j in range(lo, hi):
                                    acc += params[row + j] * x[t, j]
                                if b_off >= 0:
                                    acc += params[b_off + i]
                                x[t, i] = x[t, i] - tau * _sigma(acc, act)
                        continue
                    for t in range(T):
                        for i in range(D):
                            lo = 0
                            hi = D
                            if kind == 1:
                                hi = i
                            elif kind == 2:
                                lo = i + 1
                            acc = 0.0
                            row = w_off + i * D
                            for j in range(lo, hi):
                                acc += params[row + j] * x[t, j]
                            if b_off >= 0:
                                acc += params[b_off + i]
                            tmp[i] = acc
                        if timed == 0:
                            for i in range(D):
                                x[t, i] += _sigma(tmp[i], act)
                        else:
                            for i in range(D):
                                x[t, i] = x[t, i] + tau * _sigma(tmp[i], act)
                elif code == 1:
                    # ---- OP_VP_ATTENTION: x ↦ Λᵀ x, Λ = Cayley(C(x)); ops[k, 3] != 0: Cayley(τ C(x)) with the
                    # flow time τ = params[ops[k, 4]] (the skew layer's inverse is τ → −τ)
                    if T == 1:  # C is the 1×1 zero matrix, Λ = 1
                        continue
                    a_off = ops[k, 1]
                    skew = ops[k, 2] != 0
                    scaled = ops[k, 3] != 0
                    tau = params[ops[k, 4]] if scaled else 1.0
                    # av[j] = A x_j for j < T − 1 (x_{T−1} is never on the right of a lower entry)
                    for j in range(T - 1):
                        for i in range(D):
                            acc = 0.0
                            row = a_off + i * D
                            for c in range(D):
                                acc += params[row + c] * x[j, c]
                            av[j, i] = acc
                    if T == 3:
                        c20 = 0.0
                        c21 = 0.0
                        c10 = 0.0
                        for i in range(D):
                            c20 += x[2, i] * av[0, i]
                            c21 += x[2, i] * av[1, i]
                            c10 += x[1, i] * av[0, i]
                        w0 = c21
                        w1 = -c20
                        w2 = c10
                        if not skew:
                            w0 = w0 / root_d
                            w1 = w1 / root_d
                            w2 = w2 / root_d
                        if scaled:
                            w0 = tau * w0
                            w1 = tau * w1
                            w2 = tau * w2
                        s = 2.0 / (1.0 + (w0 * w0 + w1 * w1 + w2 * w2))
                        # Λᵀ = (I + [w]× + w wᵀ) s − I, [w]× = [[0, −w2, w1], [w2, 0, −w0], [−w1, w0, 0]]
                        k00 = (1.0 + w0 * w0) * s - 1.0
                        k01 = (-w2 + w0 * w1) * s
                        k02 = (w1 + w0 * w2) * s
                        k10 = (w2 + w1 * w0) * s
                        k11 = (1.0 + w1 * w1) * s - 1.0
                        k12 = (-w0 + w1 * w2) * s
                        k20 = (-w1 + w2 * w0) * s
                        k21 = (w0 + w2 * w1) * s
                        k22 = (1.0 + w2 * w2) * s - 1.0
                        for c in range(D):
                            z0 = x[0, c]
                            z1 = x[1, c]
                            z2 = x[2, c]
                            x[0, c] = k00 * z0 + k01 * z1 + k02 * z2
                            x[1, c] = k10 * z0 + k11 * z1 + k12 * z2
                            x[2, c] = k20 * z0 + k21 * z1 + k22 * z2
                    else:
                        # [I + S | I], S_ij = C_ij (i > j), S_ji = −C_ij; Gauss–Jordan -> [I | (I + S)⁻¹]
                        for i in range(T):
                            for j in range(2 * T):
                                gj[i, j] = 0.0
                            gj[i, i] = 1.0
                            gj[i, T + i] = 1.0
                        for i in range(1, T):
                            for j in range(i):
                                acc = 0.0
                                for c in range(D):
                                    acc += x[i, c] * av[j, c]
                                if not skew:
                                    acc = acc / root_d
                                if scaled:
                                    acc = tau * acc
                                gj[i, j] = acc
                                gj[j, i] = -acc
                        for col in range(T):
                            piv = col
                            best = abs(gj[col, col])
                            for i in range(col + 1, T):
                                if abs(gj[i, col]) > best:
                                    best = abs(gj[i, col])
                                    piv = i
                            if piv != col:
                                for j in range(2 * T):
                                    v = gj[col, j]
                                    gj[col, j] = gj[piv, j]
                                    gj[piv, j] = v
                            p = gj[col, col]
                            for j in range(2 * T):
                                gj[col, j] = gj[col, j] / p
                            for i in range(T):
                                if i != col:
                                    f = gj[i, col]
                                    if f != 0.0:
                                        for j in range(2 * T):
                                            gj[i, j] -= f * gj[col, j]
                        # Λ = 2 (I + S)⁻¹ − I; out_i = Σ_j Λ_ji x_j
                        for i in range(T):
                            for j in range(T):
                                lam[j, i] = 2.0 * gj[j, T + i] - (1.0 if i == j else 0.0)
                        for i in range(T):
                            for c in range(D):
                                acc = 0.0
                                for j in range(T):
                                    acc += lam[j, i] * x[j, c]
                                y[i, c] = acc
                        for i in range(T):
                            for c in range(D):
                                x[i, c] = y[i, c]
                elif code == 14:
                    # ---- OP_POSITION_MIXING: x_t ↦ x_t + Σ_s W_ts x_s, W (T, T, D, D) dense (zero blocks included)
                    f_m = params[ops[k, 1] : ops[k, 1] + T * T * D * D].reshape((T, T, D, D))
                    for t in range(T):
                        for i in range(D):
                            acc = 0.0
                            for q in range(T):
                                for j in range(D):
                                    acc += f_m[t, q, i, j] * x[q, j]
                            y[t, i] = x[t, i] + acc
                    for t in range(T):
                        for i in range(D):
                            x[t, i] = y[t, i]
                elif code >= 9:
                    # ---- the window models: ops on the feature vector fv (offsets in fv are fields), the
                    # weights row-major in params; only OP_INCREMENT writes the window (its first row). Weights
                    # and features are read through views (slices): indices from loop counters let LLVM drop
                    # the negative-index checks of params[offset + j] (a GRU step 1.6x cheaper, measured)
                    if code == 9:
                        # ---- OP_FEATURES: fv[dst : dst + T·D] = the window, row after row
                        dst = ops[k, 2]
                        for t in range(T):
                            for c in range(D):
                                fv[dst + t * D + c] = x[t, c]
                    elif code == 10:
                        # ---- OP_DENSE: fv[dst:dst+m] = σ(W fv[src:src+n] + b), W (m, n); act ≥ ADD: += instead;
                        # act // 8 = LOWER / UPPER: only W's strict triangle, rows last to first / first to last
                        n_in = ops[k, 3]
                        n_out = ops[k, 4]
                        w_off = ops[k, 5]
                        b_off = ops[k, 6]
                        tri = ops[k, 7] // 8
                        act = ops[k, 7] % 8
                        f_in = fv[ops[k, 1] : ops[k, 1] + n_in]
                        f_out = fv[ops[k, 2] : ops[k, 2] + n_out]
                        f_w = params[w_off : w_off + n_out * n_in].reshape((n_out, n_in))
                        f_b = params[max(b_off, 0) : max(b_off, 0) + n_out]
                        for ii in range(n_out):
                            i = n_out - 1 - ii if tri == 1 else ii
                            lo = i + 1 if tri == 2 else 0
                            hi = i if tri == 1 else n_in
                            acc = 0.0
                            for j in range(lo, hi):
                                acc += f_w[i, j] * f_in[j]
                            if b_off >= 0:
                                acc += f_b[i]
                            if act >= 4:
                                f_out[i] = f_out[i] + _sigma(acc, act - 4)
                            else:
                                f_out[i] = _sigma(acc, act)
                    elif code == 11:
                        # ---- OP_GRU: one GRU layer over the T inputs u_t = fv[src + t·n_in :] from h = 0, every
                        # h_t to fv[dst + t·w :]; params: W_i (3w, n_in), b_i, W_h (3w, w), b_h (rows r, z, n);
                        # gates g_i, g_h in fv[g_off : g_off + 6w]; torch.nn.GRU's equations
                        src = ops[k, 1]
                        dst = ops[k, 2]
                        n_in = ops[k, 3]
                        w = ops[k, 4]
                        wi = ops[k, 5]
                        bi = wi + 3 * w * n_in
                        wh = bi + 3 * w
                        bh = wh + 3 * w * w
                        f_w = params[wi:bi].reshape((3 * w, n_in))
                        f_b = params[bi:wh]
                        f_wh = params[wh:bh].reshape((3 * w, w))
                        f_bh = params[bh : bh + 3 * w]
                        f_g = fv[ops[k, 6] : ops[k, 6] + 6 * w]
                        for t in range(T):
                            f_in = fv[src + t * n_in : src + (t + 1) * n_in]
                            f_h = fv[dst + max(t - 1, 0) * w : dst + max(t, 1) * w]  # h_{t−1} (t > 0)
                            f_out = fv[dst + t * w : dst + (t + 1) * w]
                            for i in range(3 * w):
                                acc = 0.0
                                for j in range(n_in):
                                    acc += f_w[i, j] * f_in[j]
                                f_g[i] = acc + f_b[i]
                                acc = 0.0
                                if t > 0:
                                    for j in range(w):
                                        acc += f_wh[i, j] * f_h[j]
                                f_g[3 * w + i] = acc + f_bh[i]
                            for i in range(w):
                                rg = _sigma(f_g[i] + f_g[3 * w + i], 2)
                                zg = _sigma(f_g[w + i] + f_g[4 * w + i], 2)
                                ng = _sigma(f_g[2 * w + i] + rg * f_g[5 * w + i], 1)
                                if t == 0:
                                    f_out[i] = ng - zg * ng
                                else:
                                    f_out[i] = ng + zg * (f_h[i] - ng)
                    elif code == 12:
                        # ---- OP_LRU: y_t = σ(Re(C h_t) + D ⊙ u_t), h_t = Σ_{s≤t} K_{t−s} ⊙ (B u_s), K_j = γ λ^j,
                        # on the inputs u_t = fv[src + t·H :] (H features, N complex states); every y_t to
                        # fv[dst + t·H :], or (ops[k, 6] != 0) only the last to fv[dst :]; params: K_re, K_im
                        # (T, N), B_re, B_im (N, H), C_re, C_im (H, N), D (H); B u (re, im: (T, N) each),
                        # then h_t (re, im: N each), in fv after the outputs
                        src = ops[k, 1]
                        dst = ops[k, 2]
                        H = ops[k, 3]
                        N = ops[k, 4]
                        p_off = ops[k, 5]
                        last = ops[k, 6] != 0
                        act = ops[k, 7]
                        f_kr = params[p_off : p_off + T * N].reshape((T, N))
                        f_ki = params[p_off + T * N : p_off + 2 * T * N].reshape((T, N))
                        bre = p_off + 2 * T * N
                        f_br = params[bre : bre + N * H].reshape((N, H))
                        f_bi = params[bre + N * H : bre + 2 * N * H].reshape((N, H))
                        f_cr = params[bre + 2 * N * H : bre + 3 * N * H].reshape((H, N))
                        f_ci = params[bre + 3 * N * H : bre + 4 * N * H].reshape((H, N))
                        f_d = params[bre + 4 * N * H : bre + 4 * N * H + H]
                        f_u = fv[src : src + T * H].reshape((T, H))
                        v_off = dst + (H if last else T * H)
                        f_vr = fv[v_off : v_off + T * N].reshape((T, N))
                        f_vi = fv[v_off + T * N : v_off + 2 * T * N].reshape((T, N))
                        f_hr = fv[v_off + 2 * T * N : v_off + 2 * T * N + N]
                        f_hi = fv[v_off + 2 * T * N + N : v_off + 2 * T * N + 2 * N]
                        for t in range(T):
                            for n in range(N):
                                acc = 0.0
                                acc2 = 0.0
                                for j in range(H):
                                    acc += f_br[n, j] * f_u[t, j]
                                    acc2 += f_bi[n, j] * f_u[t, j]
                                f_vr[t, n] = acc
                                f_vi[t, n] = acc2
                        for t in range(T - 1 if last else 0, T):
                            o = dst if last else dst + t * H
                            f_out = fv[o : o + H]
                            for n in range(N):
                                hre = 0.0
                                him = 0.0
                                for q in range(t + 1):
                                    hre += f_kr[t - q, n] * f_vr[q, n] - f_ki[t - q, n] * f_vi[q, n]
                                    him += f_kr[t - q, n] * f_vi[q, n] + f_ki[t - q, n] * f_vr[q, n]
                                f_hr[n] = hre
                                f_hi[n] = him
                            for i in range(H):
                                acc = 0.0
                                acc2 = 0.0
                                for n in range(N):
                                    acc += f_cr[i, n] * f_hr[n]
                                    acc2 += f_ci[i, n] * f_hi[n]
                                f_out[i] = _sigma(acc - acc2 + f_d[i] * f_u[t, i], act)
                    else:
                        # ---- OP_INCREMENT: the next state x_T = base + fv[src : src + D] into the window's
                        # first row; base = x_{T−1} (ops[k, 2] = 0) or 2 x_{T−1} − x_{T−2} (1); ops[k, 2] = 2:
                        # the whole next window, fv[src : src + T·D] row after row
                        src = ops[k, 1]
                        if ops[k, 2] == 2:
                            for t in range(T):
                                for c in range(D):
                                    x[t, c] = fv[src + t * D + c]
                            continue
                        for c in range(D):
                            if ops[k, 2] != 0:
                                x[0, c] = (2.0 * x[T - 1, c] - x[T - 2, c]) + fv[src + c]
                            else:
                                x[0, c] = x[T - 1, c] + fv[src + c]
                elif code >= 5:
                    # ---- the symplectic shears on z = (q, p), n = D/2: the target half (q when ops[k, 1] != 0,
                    # else p) gains f(source half); source and target are disjoint, so f is read while adding
                    n = D // 2
                    tgt = 0 if ops[k, 1] != 0 else n
                    src = n - tgt
                    if code == 5:
                        # ---- OP_SYMP_LINEAR: target += source S (S symmetric n×n, row form), then z += b
                        s_off = ops[k, 2]
                        b_off = ops[k, 3]
                        for t in range(T):
                            if s_off >= 0:
                                for i in range(n):
                                    acc = 0.0
                                    for j in range(n):
                                        acc += x[t, src + j] * params[s_off + j * n + i]
                                    x[t, tgt + i] = x[t, tgt + i] + acc
                            if b_off >= 0:
                                for i in range(D):
                                    x[t, i] = x[t, i] + params[b_off + i]
                    elif code == 6:
                        # ---- OP_SYMP_ACTIVATION: target += a ⊙ σ(source)
                        a_off = ops[k, 2]
                        act = ops[k, 3]
                        for t in range(T):
                            for i in range(n):
                                x[t, tgt + i] = x[t, tgt + i] + params[a_off + i] * _sigma(x[t, src + i], act)
                    elif code == 7:
                        # ---- OP_SYMP_GRADIENT: target += Kᵀ (a ⊙ σ(K source + b)), K (h, n)
                        k_off = ops[k, 2]
                        b_off = ops[k, 3]
                        a_off = ops[k, 4]
                        width = ops[k, 5]
                        act = ops[k, 6]
                        for t in range(T):
                            for i in range(n):
                                tmp[i] = 0.0
                            for m in range(width):
                                acc = 0.0
                                row = k_off + m * n
                                for j in range(n):
                                    acc += x[t, src + j] * params[row + j]
                                hm = params[a_off + m] * _sigma(acc + params[b_off + m], act)
                                for i in range(n):
                                    tmp[i] += hm * params[row + i]
                            for i in range(n):
                                x[t, tgt + i] = x[t, tgt + i] + tmp[i]
                    else:
                        # ---- OP_SYMP_ATTENTION: C = Xs A Xsᵀ (T×T), σ = softmax(C) over all entries or per
                        # column; symmetric A: target += 2 σᵀ Xs A; arbitrary: σ Xs Aᵀ + σᵀ Xs A
                        a_off = ops[k, 2]
                        sym = ops[k, 3] != 0
                        by_column = ops[k, 4] != 0
                        for t in range(T):  # av = Xs A, y = Xs Aᵀ
                            for c in range(n):
                                acc = 0.0
                                acc2 = 0.0
                                for j in range(n):
                                    acc += x[t, src + j] * params[a_off + j * n + c]
                                    acc2 += x[t, src + j] * params[a_off + c * n + j]
                                av[t, c] = acc
                                y[t, c] = acc2
                        for i in range(T):  # lam = C
                            for j in range(T):
                                acc = 0.0
                                for c in range(n):
                                    acc += av[i, c] * x[j, src + c]
                                lam[i, j] = acc
                        if by_column:
                            for j in range(T):
                                top = -math.inf
                                for i in range(T):
                                    if lam[i, j] > top:
                                        top = lam[i, j]
                                total = 0.0
                                for i in range(T):
                                    e = math.exp(lam[i, j] - top)
                                    lam[i, j] = e
                                    total += e
                                for i in range(T):
                                    lam[i, j] = lam[i, j] / total
                        else:
                            top = -math.inf
                            for i in range(T):
                                for j in range(T):
                                    if lam[i, j] > top:
                                        top = lam[i, j]
                            total = 0.0
                            for i in range(T):
                                for j in range(T):
                                    e = math.exp(lam[i, j] - top)
                                    lam[i, j] = e
                                    total += e
                            for i in range(T):
                                for j in range(T):
                                    lam[i, j] = lam[i, j] / total
                        for t in range(T):
                            for c in range(n):
                                acc = 0.0
                                for i in range(T):
                                    acc += lam[i, t] * av[i, c]
                                if sym:
                                    acc = 2.0 * acc
                                else:
                                    acc2 = 0.0
                                    for j in range(T):
                                        acc2 += lam[t, j] * y[j, c]
                                    acc = acc2 + acc
                                x[t, tgt + c] = x[t, tgt + c] + acc
                elif code >= 3:
                    # ---- OP_LP_LAYER / OP_LP_COUPLING (dim 3): z_t ↦ R(k, θ_t) z_t by Rodrigues' formula,
                    # θ_t = −τ ψ(k·z_t) (layer) or −τ α_t ψ(Σ_j α_j k·z_j) (coupling),
                    # ψ(s) = d + Σ_m w_m tanh(b_m s + c_m)
                    k_off = ops[k, 1]
                    p_off = ops[k, 2]
                    width = ops[k, 3]
                    tau = params[ops[k, 4]]
                    a_off = ops[k, 5]
                    e0 = params[k_off]
                    e1 = params[k_off + 1]
                    e2 = params[k_off + 2]
                    psi = 0.0
                    for t in range(T):
                        kz = x[t, 0] * e0 + x[t, 1] * e1 + x[t, 2] * e2
                        if code == 3 or t == 0:
                            arg = kz
                            if code == 4:  # s = Σ_j α_j k·z_j, once per window
                                arg = 0.0
                                for j in range(T):
                                    arg += (x[j, 0] * e0 + x[j, 1] * e1 + x[j, 2] * e2) * params[a_off + j]
                            acc = 0.0
                            for m in range(width):
                                acc += params[p_off + 2 * width + m] * _sigma(
                                    arg * params[p_off + m] + params[p_off + width + m], 1)
                            psi = params[p_off + 3 * width] + acc
                        if code == 3:
                            theta = -tau * psi
                        else:
                            theta = -tau * (params[a_off + t] * psi)
                        c = math.cos(theta)
                        sn = math.sin(theta)
                        omc = 1.0 - c
                        z0 = x[t, 0]
                        z1 = x[t, 1]
                        z2 = x[t, 2]
                        x[t, 0] = z0 * c + (e1 * z2 - e2 * z1) * sn + e0 * kz * omc
                        x[t, 1] = z1 * c + (e2 * z0 - e0 * z2) * sn + e1 * kz * omc
                        x[t, 2] = z2 * c + (e0 * z1 - e1 * z0) * sn + e2 * kz * omc
                else:
                    # ---- OP_MH_ATTENTION: per head softmax(Q Kᵀ · scale) V, concat, (out proj), (+ x)
                    standard = ops[k, 1] != 0
                    n_heads = ops[k, 2]
                    w_off = ops[k, 3]
                    b_off = ops[k, 4]
                    o_off = ops[k, 5]
                    ob_off = ops[k, 6]
                    add_connection = ops[k, 7] != 0
                    dh = D // n_heads
                    scale = 1.0 / math.sqrt(dh if standard else D)
                    for t in range(T):  # qkv[t] = Wt x_t (+ b), Wt (3 D, D)
                        for i in range(3 * D):
                            acc = 0.0
                            row = w_off + i * D
                            for c in range(D):
                                acc += params[row + c] * x[t, c]
                            if b_off >= 0:
                                acc += params[b_off + i]
                            qkv[t, i] = acc
                    for h in range(n_heads):
                        q0 = h * dh
                        k0 = D + h * dh
                        v0 = 2 * D + h * dh
                        for n in range(T):
                            top = -math.inf
                            for m in range(T):
                                acc = 0.0
                                for c in range(dh):
                                    acc += qkv[n, q0 + c] * qkv[m, k0 + c]
                                acc = acc * scale
                                sc[m] = acc
                                if acc > top:
                                    top = acc
                            total = 0.0
                            for m in range(T):
                                e = math.exp(sc[m] - top)
                                sc[m] = e
                                total += e
                            for m in range(T):
                                sc[m] = sc[m] / total
                            for c in range(dh):
                                acc = 0.0
                                for m in range(T):
                                    acc += sc[m] * qkv[m, v0 + c]
                                y[n, q0 + c] = acc
                    if standard:  # out = H Woᵀ + bo
                        for t in range(T):
                            for i in range(D):
                                acc = 0.0
                                row = o_off + i * D
                                for c in range(D):
                                    acc += params[row + c] * y[t, c]
                                tmp[i] = acc + params[ob_off + i]
                            for i in range(D):
                                y[t, i] = tmp[i]
                    for t in range(T):
                        for i in range(D):
                            if add_connection:
                                x[t, i] = x[t, i] + y[t, i]
                            else:
                                x[t, i] = y[t, i]
            for t in range(adv):
                for c in range(D):
                    out[r, pos + t, c] = x[t, c]
            pos += adv
            if adv != T:  # next window: the last T of [window, kept states]
                for t in range(T):
                    for c in range(D):
                        y[t, c] = x[t, c]
                for t in range(T):
                    for c in range(D):
                        if t + adv < T:
                            x[t, c] = win[t + adv, c]
                        else:
                            x[t, c] = y[t + adv - T, c]
        for t in range(T):
            for c in range(D):
                ctx[r, t, c] = x[t, c]


