/* Checks of kernels/cuda/cuda_attention_cudnn.cu. Built by make where nvcc exists
 * ($(BUILD)/tests/gpu/cudnn_graph_check); tests/test_cudnn_graphs.sh runs the offline mode in
 * `make test` (no GPU needed), tests/gpu/check.sh runs the GPU mode.
 *
 * --offline [devver]   No GPU needed. Builds the forward and backward graphs for a few shapes and
 *                      asks cuDNN's heuristics, for the device properties of an H200 with
 *                      deviceVer = devver (800, 900 (default), 1000), which engines take them;
 *                      tries to finalize each plan (fails at module loading without a driver).
 *                      cuDNN's runtime-compiled engines need a libcuda to even run their support
 *                      checks; the driver stub does:
 *                        mkdir -p /tmp/fakecuda
 *                        ln -sf /usr/local/cuda/lib64/stubs/libcuda.so /tmp/fakecuda/libcuda.so.1
 *                        LD_LIBRARY_PATH=/tmp/fakecuda:/usr/local/cuda/lib64 ./cudnn_attn_check --offline
 *                      Extra: --offline devver B T H G d  for one shape.
 * (no argument)        On a GPU: for a few shapes, cuDNN forward and backward against the custom
 *                      kernels (out, lse, dq, dk, dv: max |diff| / max |ref|), bitwise run-to-run
 *                      equality of three cuDNN backward runs, and timings. Prints one line per
 *                      check, "ok - " or "not ok - ", like the test suite.
 * Build: make build/tests/gpu/cudnn_graph_check (this file includes cuda_attention_cudnn.cu
 * itself, to reach its graph builders; the other CUDA objects come from libphaselab.a). */
#include "kernels/cuda/cuda_attention_cudnn.cu"
#include <vector>
extern "C" {
#include "common/errors.h"
}

#ifdef PHASELAB_CUEMU
#error "not for the emulation build"
#endif

/* ======================= offline ======================= */
static int g_devver = 900, g_offline_fails;
static const char *JSON_H200 =
    "{\"maxGridSize\":[2147483647,65535,65535],\"maxBlockSize\":[1024,1024,64],\"regsPerBlock\":65536,"
    "\"multiProcessorCount\":132,\"warpSize\":32,\"maxSharedMemoryPerBlock\":49152,"
    "\"maxSharedMemoryPerBlockOptin\":232448,\"reservedSharedMemoryPerBlock\":1024,\"maxRegistersPerSM\":65536,"
    "\"maxCtasPerSM\":32,\"maxThreadsPerBlock\":1024,\"maxThreadsPerSM\":2048,\"pciDeviceId\":9013,\"isTccDriver\":0,"
    "\"supportCoopLaunch\":1,\"totalGlobalMem\":150754820096,\"smClockRateKHz\":1980000,\"memClockRateKHz\":3201000,"
    "\"l2CacheSize\":52428800,\"cudaDeviceId\":0,\"deviceVer\":%d,\"driverVer\":13000,\"deviceName\":\"NVIDIA H200\"}";

static void offline_shape(cudnnBackendDescriptor_t devprop, int kind, int B, int T, int H, int G, int d) {
    Entry e;
    memset(&e, 0, sizeof e);
    e.kind = kind; e.B = B; e.T = T; e.H = H; e.G = G; e.d = d;
    Graph *g = (Graph *)calloc(1, sizeof(Graph));
    g->next_uid = UID_VIRTUAL0;
    if (kind == KIND_FWD) build_fwd_graph(g, &e);
    else build_bwd_graph(g, &e);
    char shape[96], detail[400];
    describe(&e, shape, sizeof shape);
    if (!g_ok(g)) {
        last_error(detail, sizeof detail);
        printf("not ok - cudnn_graph sm%d %s: graph: %s: %s %s\n", g_devver / 10, shape, g->what, cudnnGetErrorString(g->st), detail);
        g_offline_fails++;
        return;
    }
    cudnnBackendDescriptor_t og = g_new(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    SET(g, og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->n_ops, g->ops);
    g_finalize(g, og, "operation graph finalize");
    int usable = 0;
    for (int m = 0; m < 2 && g_ok(g); m++) {
        cudnnBackendHeurMode_t mode = m ? CUDNN_HEUR_MODE_FALLBACK : CUDNN_HEUR_MODE_A;
        cudnnBackendDescriptor_t heur = g_new(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
        SET(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &og);
        SET(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
        SET(g, heur, CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &devprop);
        g_finalize(g, heur, "heuristics finalize");
        int64_t count = 0, got = 0;
        if (g_ok(g))
            cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL);
        if (count > 24) count = 24;
        cudnnBackendDescriptor_t cfgs[24];
        for (int64_t i = 0; i < count; i++) cfgs[i] = g_new(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config");
        if (g_ok(g) && count)
            cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                     cfgs);
        printf("# %s: heuristics %s: %lld candidates, %lld pass the support checks\n", shape, m ? "FALLBACK" : "A",
               (long long)count, (long long)got);
        for (int64_t i = 0; i < got && g_ok(g); i++) {
            cudnnBackendDescriptor_t engine = g_new(g, CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine");
            int64_t n = 0, index = -1, ws = -1, n_notes = 0;
            cudnnBackendGetAttribute(cfgs[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine);
            cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index);
            cudnnBackendGetAttribute(cfgs[i], CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws);
            cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
            cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                     CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n_notes, notes);
            bool nondet = false;
            for (int64_t j = 0; j < n_notes; j++) nondet |= notes[j] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
            cudnnBackendDescriptor_t plan = g_new(g, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "plan");
            cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                     &devprop);
            cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                     &cfgs[i]);
            cudnnStatus_t st = cudnnBackendFinalize(plan);
            last_error(detail, sizeof detail);
            printf("#   engine %lld: workspace %lld bytes%s; plan finalize: %s %s\n", (long long)index, (long long)ws,
                   nondet ? ", NONDETERMINISTIC" : "", cudnnGetErrorString(st), st ? detail : "");
            usable++;
        }
    }
    printf("%s - cudnn_graph sm%d %s: %d engine configs accept the graph\n", usable ? "ok" : "not ok", g_devver / 10, shape, usable);
    if (!usable) g_offline_fails++;
    g_destroy(g);
    free(g);
}

static int offline(int argc, char **argv) {
    int devver = argc > 2 ? atoi(argv[2]) : 900;
    g_devver = devver;
    char json[2048];
    snprintf(json, sizeof json, JSON_H200, devver);
    cudnnBackendDescriptor_t devprop = NULL;
    cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, &devprop);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(devprop, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
                                      (int64_t)strlen(json) + 1, json);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(devprop);
    if (st != CUDNN_STATUS_SUCCESS) {
        printf("not ok - device properties: %s\n", cudnnGetErrorString(st));
        return 1;
    }
    printf("# cuDNN %zu, deviceVer %d\n", cudnnGetVersion(), devver);
    if (argc >= 8) {
        int B = atoi(argv[3]), T = atoi(argv[4]), H = atoi(argv[5]), G = atoi(argv[6]), d = atoi(argv[7]);
        offline_shape(devprop, KIND_FWD, B, T, H, G, d);
        offline_shape(devprop, KIND_BWD, B, T, H, G, d);
        return 0;
    }
    const int shapes[][5] = {{2, 512, 8, 8, 64}, {2, 512, 8, 2, 128}, {3, 333, 6, 2, 96}, {1, 4096, 16, 8, 128}};
    for (const auto &s : shapes) {
        offline_shape(devprop, KIND_FWD, s[0], s[1], s[2], s[3], s[4]);
        offline_shape(devprop, KIND_BWD, s[0], s[1], s[2], s[3], s[4]);
    }
    return g_offline_fails ? 1 : 0;
}

/* ======================= on a GPU ======================= */
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float frand(void) {   /* uniform in [-1, 1) */
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

struct Dev {
    const Backend *be;
    act_t *p;
    size_t n;
    Dev(const Backend *b, size_t n_, float amp) : be(b), n(n_) {
        p = (act_t *)b->alloc(b->ctx, n * b->act_bytes);
        std::vector<float> h(n);
        for (size_t i = 0; i < n; i++) h[i] = amp * frand();
        b->upload_act(b->ctx, p, h.data(), n);
    }
    std::vector<float> get() const {
        std::vector<float> h(n);
        be->download_act(be->ctx, h.data(), p, n);
        return h;
    }
    ~Dev() { be->free(be->ctx, p); }
};

static double rel_err(const std::vector<float> &a, const std::vector<float> &ref) {
    double md = 0, mr = 0;
    for (size_t i = 0; i < a.size(); i++) {
        md = fmax(md, fabs((double)a[i] - ref[i]));
        mr = fmax(mr, fabs((double)ref[i]));
    }
    return md / (mr > 0 ? mr : 1);
}

static std::vector<float> download_f32(const Backend *be, const float *p, size_t n) {
    std::vector<float> h(n);
    be->download(be->ctx, h.data(), p, n * sizeof(float));
    return h;
}

static int g_fails;
static void check(bool ok, const char *fmt, const char *shape, double v) {
    printf("%s - %s: ", ok ? "ok" : "not ok", shape);
    printf(fmt, v);
    printf("\n");
    if (!ok) g_fails++;
}

static float time_ms(const Backend *be, void (*fn)(void *), void *ctx, int iters) {
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    fn(ctx);
    cudaEventRecord(a, be->ctx->stream);
    for (int i = 0; i < iters; i++) fn(ctx);
    cudaEventRecord(b, be->ctx->stream);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return ms / iters;
}

struct Call {
    const Backend *be;
    AttnShape s;
    act_t *out, *dq, *dk, *dv;
    float *lse;
    const act_t *q, *k, *v, *dout;
};
static void custom_fwd(void *c_) {
    Call *c = (Call *)c_;
    c->be->attention_fwd(c->be->ctx, &c->s, c->out, c->lse, c->q, c->k, c->v, NULL, NULL, NULL);
}
static void custom_bwd(void *c_) {
    Call *c = (Call *)c_;
    c->be->attention_bwd(c->be->ctx, &c->s, c->dq, c->dk, c->dv, NULL, NULL, NULL, c->dout, c->out, c->lse, c->q, c->k, c->v, NULL,
                         NULL, NULL);
}
static void cudnn_fwd(void *c_) {
    Call *c = (Call *)c_;
    cu_cudnn_attention_fwd(c->be->ctx, &c->s, c->out, c->lse, c->q, c->k, c->v);
}
static void cudnn_bwd(void *c_) {
    Call *c = (Call *)c_;
    cu_cudnn_attention_bwd(c->be->ctx, &c->s, c->dq, c->dk, c->dv, c->dout, c->out, c->lse, c->q, c->k, c->v);
}

static void gpu_shape(const Backend *be, int B, int T, int H, int G, int d) {
    AttnShape s;
    memset(&s, 0, sizeof s);
    s.B = B; s.T = T; s.H = H; s.G = G; s.d = d; s.visibility = VIS_FULL;
    char shape[96];
    snprintf(shape, sizeof shape, "B=%d T=%d H=%d G=%d d=%d", B, T, H, G, d);
    const size_t nq = (size_t)B * T * H * d, nkv = (size_t)B * T * G * d, rows = (size_t)B * T * H;
    Dev q(be, nq, 2.0f), k(be, nkv, 2.0f), v(be, nkv, 1.0f), dout(be, nq, 1.0f);
    Dev out_c(be, nq, 0), dq_c(be, nq, 0), dk_c(be, nkv, 0), dv_c(be, nkv, 0);
    Dev out_n(be, nq, 0), dq_n(be, nq, 0), dk_n(be, nkv, 0), dv_n(be, nkv, 0);
    float *lse_c = (float *)be->alloc(be->ctx, rows * 4), *lse_n = (float *)be->alloc(be->ctx, rows * 4);

    /* reference: the custom kernels */
    setenv("PHASELAB_ATTN", "custom", 1);
    Call cc = {be, s, out_c.p, dq_c.p, dk_c.p, dv_c.p, lse_c, q.p, k.p, v.p, dout.p};
    custom_fwd(&cc);
    custom_bwd(&cc);
    be->synchronize(be->ctx);
    unsetenv("PHASELAB_ATTN");

    /* cuDNN forward */
    int rf = cu_cudnn_attention_fwd(be->ctx, &s, out_n.p, lse_n, q.p, k.p, v.p);
    be->synchronize(be->ctx);
    check(rf == 1, "cuDNN forward ran (%g)", shape, rf);
    if (rf) {
        double e_out = rel_err(out_n.get(), out_c.get());
        std::vector<float> l1 = download_f32(be, lse_n, rows), l0 = download_f32(be, lse_c, rows);
        double e_lse = 0;
        for (size_t i = 0; i < rows; i++) e_lse = fmax(e_lse, fabs((double)l1[i] - l0[i]));
        check(e_out < 2e-2, "forward out vs custom: max|diff|/max|ref| = %.3g", shape, e_out);
        check(e_lse < 1e-2, "forward lse vs custom: max|diff| = %.3g", shape, e_lse);
    }

    /* cuDNN backward, on the custom forward's out and lse */
    setenv("PHASELAB_CUDNN_ATTN_BWD", "1", 1);
    Call cn = {be, s, out_c.p, dq_n.p, dk_n.p, dv_n.p, lse_c, q.p, k.p, v.p, dout.p};
    int rb = cu_cudnn_attention_bwd(be->ctx, &s, dq_n.p, dk_n.p, dv_n.p, dout.p, out_c.p, lse_c, q.p, k.p, v.p);
    be->synchronize(be->ctx);
    check(rb == 1, "cuDNN backward ran (%g)", shape, rb);
    if (rb) {
        std::vector<float> dq0 = dq_n.get(), dk0 = dk_n.get(), dv0 = dv_n.get();
        check(rel_err(dq0, dq_c.get()) < 3e-2, "backward dq vs custom: %.3g", shape, rel_err(dq0, dq_c.get()));
        check(rel_err(dk0, dk_c.get()) < 3e-2, "backward dk vs custom: %.3g", shape, rel_err(dk0, dk_c.get()));
        check(rel_err(dv0, dv_c.get()) < 3e-2, "backward dv vs custom: %.3g", shape, rel_err(dv0, dv_c.get()));
        int same = 1;
        for (int rep = 0; rep < 3; rep++) {
            cudnn_bwd(&cn);
            be->synchronize(be->ctx);
            same &= dq_n.get() == dq0 && dk_n.get() == dk0 && dv_n.get() == dv0;
        }
        check(same, "backward bitwise identical over 3 more runs (%g)", shape, same);
        /* custom_bwd goes through the backend's attention_bwd, which would take cuDNN itself */
        setenv("PHASELAB_ATTN", "custom", 1);
        float t0 = time_ms(be, custom_bwd, &cc, 5);
        unsetenv("PHASELAB_ATTN");
        float t1 = time_ms(be, cudnn_bwd, &cn, 5);
        printf("# %s: backward custom %.3f ms, cuDNN %.3f ms\n", shape, t0, t1);
    }
    unsetenv("PHASELAB_CUDNN_ATTN_BWD");
    if (rf) {
        Call cf = {be, s, out_n.p, NULL, NULL, NULL, lse_n, q.p, k.p, v.p, NULL};
        setenv("PHASELAB_ATTN", "custom", 1);
        float t0 = time_ms(be, custom_fwd, &cc, 5);
        unsetenv("PHASELAB_ATTN");
        float t1 = time_ms(be, cudnn_fwd, &cf, 5);
        printf("# %s: forward custom %.3f ms, cuDNN %.3f ms\n", shape, t0, t1);
    }
    be->free(be->ctx, lse_c);
    be->free(be->ctx, lse_n);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);   /* a crash keeps the lines printed before it */
    if (argc > 1 && strcmp(argv[1], "--offline") == 0) return offline(argc, argv);
    char err[ERR_LEN] = "";
    const Backend *be = backend_cuda(0, err);
    if (!be) {
        printf("skip - no GPU: %s\n", err);
        return 0;
    }
    setenv("PHASELAB_CUDNN_ATTN_VERBOSE", "1", 1);
    gpu_shape(be, 2, 256, 8, 8, 64);
    gpu_shape(be, 2, 256, 8, 2, 64);
    gpu_shape(be, 3, 333, 6, 2, 96);
    gpu_shape(be, 2, 1000, 16, 8, 128);
    gpu_shape(be, 2, 4096, 16, 8, 128);
    printf("%d failed\n", g_fails);
    return g_fails ? 1 : 0;
}
