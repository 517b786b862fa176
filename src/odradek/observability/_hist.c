/*
 * The hot half of /metrics (observability/stats.py) in C: the histogram's `observe`, the
 * per-request meter (`RequestMeter.record`: latency and error codes per API version) and
 * the coordinator's event timer (`EventTimer.record`: processing and queue time).
 *
 * Why native: every request records its latency, and every coordinator operation its
 * processing and queue time (KIP-848 "Broker Metrics"). Binning a sample in CPython
 * (a bisect, a list item, two attributes) costs about 140 ns; a steady
 * ConsumerGroupHeartbeat takes about 30 µs in all and carries three samples, which put
 * the cost of metrics on heartbeats over the 5 % the observability issue allows
 * (BENCHMARKS.md "Metrics"). Here a sample is one method call, a binary search over a
 * handful of doubles and three stores.
 *
 * A heartbeat over TCP showed the samples cost about three times what they cost in a
 * tight loop in process: between two requests the event loop, the transport and the
 * parser run, and a heartbeat's few counters are cold again when it is answered. So a
 * request's accounting is one call touching one slot of memory (its latency buckets and
 * its error counts side by side), not a Python frame walking four objects and two dicts.
 *
 * Same semantics as the pure-Python twins in observability/stats.py (`PyHistogram`,
 * `PyRequestMeter`, `PyEventTimer`), which the tests compare against these: a value goes to the first bucket whose upper
 * bound is >= it (bisect_left: Prometheus' "le"), the last bucket is +Inf; `sum` and
 * `max` (0.0 until a larger value is seen) are kept as doubles.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>

typedef struct {
    PyObject_HEAD
    PyObject *bounds;      /* the bounds as given (a tuple of numbers) */
    double *edges;         /* the bounds as doubles, ascending; one block with counts */
    Py_ssize_t n;          /* number of bounds; counts has n + 1 slots */
    uint64_t *counts;
    double sum;
    double max;
} Hist;

/* `bounds` as a tuple and as ascending doubles in `*edges` (one block of n doubles then
   n + 1 zeroed counts, which `*counts` points at); NULL with an exception set. */
static PyObject *read_bounds(PyObject *bounds, double **edges, uint64_t **counts, Py_ssize_t *n_out)
{
    PyObject *seq = PySequence_Tuple(bounds);
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    double *block = PyMem_Calloc(2 * n + 1, sizeof(double));  /* sizeof(double) == sizeof(uint64_t) */
    if (block == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        double v = PyFloat_AsDouble(PyTuple_GET_ITEM(seq, i));
        if (v == -1.0 && PyErr_Occurred())
            goto fail;
        if (v != v || (i > 0 && v <= block[i - 1])) {
            PyErr_SetString(PyExc_ValueError, "histogram bounds must be strictly ascending");
            goto fail;
        }
        block[i] = v;
    }
    *edges = block;
    *counts = (uint64_t *)(block + n);
    *n_out = n;
    return seq;
fail:
    PyMem_Free(block);
    Py_DECREF(seq);
    return NULL;
}

/* bisect_left: the first edge >= v; n (the +Inf bucket) when there is none. */
static inline Py_ssize_t bucket_of(const double *e, Py_ssize_t n, double v)
{
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) >> 1;
        if (e[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* A sample as a double; -1 with an exception for a non-number or a NaN (a NaN duration is
   a bug upstream, and bisect and this search would bin it differently: refused). */
static inline int sample_of(PyObject *arg, double *out)
{
    double v = PyFloat_AsDouble(arg);
    if (v == -1.0 && PyErr_Occurred())
        return -1;
    if (v != v) {
        PyErr_SetString(PyExc_ValueError, "NaN observed");
        return -1;
    }
    *out = v;
    return 0;
}

static inline void hist_add(Hist *h, double v)
{
    h->counts[bucket_of(h->edges, h->n, v)]++;
    h->sum += v;
    if (v > h->max)
        h->max = v;
}

static void Hist_dealloc(Hist *self)
{
    Py_XDECREF(self->bounds);
    PyMem_Free(self->edges);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Hist_init(Hist *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"bounds", NULL};
    PyObject *bounds = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O", kwlist, &bounds))
        return -1;
    double *edges;
    uint64_t *counts;
    Py_ssize_t n;
    PyObject *seq = read_bounds(bounds, &edges, &counts, &n);
    if (seq == NULL)
        return -1;
    Py_XSETREF(self->bounds, seq);
    PyMem_Free(self->edges);
    self->edges = edges;
    self->counts = counts;
    self->n = n;
    self->sum = 0.0;
    self->max = 0.0;
    return 0;
}

static PyObject *Hist_observe(Hist *self, PyObject *arg)
{
    double v;
    if (sample_of(arg, &v) < 0)
        return NULL;
    hist_add(self, v);
    Py_RETURN_NONE;
}

static PyObject *Hist_get_counts(Hist *self, void *closure)
{
    PyObject *out = PyList_New(self->n + 1);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i <= self->n; i++) {
        PyObject *c = PyLong_FromUnsignedLongLong(self->counts[i]);
        if (c == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, c);
    }
    return out;
}

static PyObject *Hist_get_bounds(Hist *self, void *closure)
{
    Py_INCREF(self->bounds);
    return self->bounds;
}

static PyObject *Hist_get_sum(Hist *self, void *closure)
{
    return PyFloat_FromDouble(self->sum);
}

static PyObject *Hist_get_max(Hist *self, void *closure)
{
    return PyFloat_FromDouble(self->max);
}

static PyMethodDef Hist_methods[] = {
    {"observe", (PyCFunction)Hist_observe, METH_O, "Count one sample."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Hist_getset[] = {
    {"bounds", (getter)Hist_get_bounds, NULL, "the buckets' upper bounds", NULL},
    {"counts", (getter)Hist_get_counts, NULL, "samples per bucket (a new list; the last is +Inf)", NULL},
    {"sum", (getter)Hist_get_sum, NULL, "the samples' sum", NULL},
    {"max", (getter)Hist_get_max, NULL, "the largest sample (0.0 before any larger one)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject HistType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "odradek.observability._hist.Histogram",
    .tp_basicsize = sizeof(Hist),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Bucket counts, sum and max of observed values (see stats.py).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Hist_init,
    .tp_dealloc = (destructor)Hist_dealloc,
    .tp_methods = Hist_methods,
    .tp_getset = Hist_getset,
};

/* --- EventTimer: the coordinator runtime's two samples per operation ----------------- */

typedef struct {
    PyObject_HEAD
    Hist *processing;  /* KIP-848 event-processing-time */
    Hist *queue;       /* KIP-848 event-queue-time */
} Timer;

static void Timer_dealloc(Timer *self)
{
    Py_XDECREF(self->processing);
    Py_XDECREF(self->queue);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Timer_init(Timer *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"processing", "queue", NULL};
    PyObject *p = NULL, *q = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!", kwlist, &HistType, &p, &HistType, &q))
        return -1;
    Py_INCREF(p);
    Py_INCREF(q);
    Py_XSETREF(self->processing, (Hist *)p);
    Py_XSETREF(self->queue, (Hist *)q);
    return 0;
}

/* record(started, ended, queued_at): ended - started is the processing time; started -
   queued_at (0 when the clock went backwards) the queue time, unless queued_at is None
   (an operation no request waits on). */
static PyObject *Timer_record(Timer *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "record(started, ended, queued_at)");
        return NULL;
    }
    double started, ended, queued = 0.0;
    if (sample_of(args[0], &started) < 0 || sample_of(args[1], &ended) < 0)
        return NULL;
    if (args[2] != Py_None && sample_of(args[2], &queued) < 0)
        return NULL;
    hist_add(self->processing, ended - started);
    if (args[2] != Py_None)
        hist_add(self->queue, started > queued ? started - queued : 0.0);
    Py_RETURN_NONE;
}

static PyMethodDef Timer_methods[] = {
    {"record", (PyCFunction)(void (*)(void))Timer_record, METH_FASTCALL, "Time one operation."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Timer_members[] = {
    {"processing", T_OBJECT, offsetof(Timer, processing), READONLY, "the processing-time histogram"},
    {"queue", T_OBJECT, offsetof(Timer, queue), READONLY, "the queue-time histogram"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject TimerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "odradek.observability._hist.EventTimer",
    .tp_basicsize = sizeof(Timer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Processing and queue time of coordinator operations into two Histograms.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Timer_init,
    .tp_dealloc = (destructor)Timer_dealloc,
    .tp_methods = Timer_methods,
    .tp_members = Timer_members,
};

/* --- RequestMeter: latency and error codes per API key and version ------------------- */

#define MAX_API 256      /* API keys are below 256 (Kafka's are below 100) */
#define MAX_VERSION 64
#define ERR_SLOTS 256    /* codes -1 .. 254 counted in place; others in a dict */

typedef struct {
    double sum;
    double max;
    int walk;            /* entries to look into: lists is None or not empty */
    PyObject *lists;     /* the planner's answer for this API version */
    PyObject *other;     /* code -> count for codes outside the slots; NULL until one */
    uint64_t errs[ERR_SLOTS];  /* errs[code + 1] */
    uint64_t counts[];   /* n + 1 latency buckets */
} Slot;

typedef struct {
    PyObject_HEAD
    PyObject *bounds;
    double *edges;       /* one block with an unused counts array (read_bounds) */
    Py_ssize_t n;
    PyObject *planner;   /* (api_key, version) -> entry lists: a tuple, or None for all */
    PyObject *walker;    /* (result, lists) -> {code: count} found in the entries */
    Slot **rows[MAX_API];
} Meter;

static PyObject *s_error_code;  /* "error_code", interned */

static void Meter_dealloc(Meter *self)
{
    for (int a = 0; a < MAX_API; a++) {
        Slot **row = self->rows[a];
        if (row == NULL)
            continue;
        for (int v = 0; v < MAX_VERSION; v++) {
            if (row[v] != NULL) {
                Py_XDECREF(row[v]->lists);
                Py_XDECREF(row[v]->other);
                PyMem_Free(row[v]);
            }
        }
        PyMem_Free(row);
    }
    Py_XDECREF(self->bounds);
    Py_XDECREF(self->planner);
    Py_XDECREF(self->walker);
    PyMem_Free(self->edges);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Meter_init(Meter *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"bounds", "planner", "walker", NULL};
    PyObject *bounds, *planner, *walker;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO", kwlist, &bounds, &planner, &walker))
        return -1;
    if (self->bounds != NULL) {
        PyErr_SetString(PyExc_TypeError, "RequestMeter is initialised once");
        return -1;
    }
    double *edges;
    uint64_t *unused;
    PyObject *seq = read_bounds(bounds, &edges, &unused, &self->n);
    if (seq == NULL)
        return -1;
    self->bounds = seq;
    self->edges = edges;
    Py_INCREF(planner);
    self->planner = planner;
    Py_INCREF(walker);
    self->walker = walker;
    return 0;
}

static Slot *slot_for(Meter *self, long api, long version)
{
    Slot **row = self->rows[api];
    if (row == NULL) {
        row = self->rows[api] = PyMem_Calloc(MAX_VERSION, sizeof(Slot *));
        if (row == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
    }
    Slot *s = row[version];
    if (s != NULL)
        return s;
    PyObject *lists = PyObject_CallFunction(self->planner, "ll", api, version);
    if (lists == NULL)
        return NULL;
    int walk = lists == Py_None ? 1 : PyObject_IsTrue(lists);
    if (walk < 0) {
        Py_DECREF(lists);
        return NULL;
    }
    s = PyMem_Calloc(1, sizeof(Slot) + (self->n + 1) * sizeof(uint64_t));
    if (s == NULL) {
        Py_DECREF(lists);
        PyErr_NoMemory();
        return NULL;
    }
    s->lists = lists;
    s->walk = walk;
    return row[version] = s;
}

/* Count `n` answers carrying `code` (None: none; not an int: kept by value in `other`). */
static int count_code(Slot *s, PyObject *code, uint64_t n)
{
    if (code == Py_None)
        return 0;
    if (PyLong_Check(code)) {
        int overflow;
        long c = PyLong_AsLongAndOverflow(code, &overflow);
        if (c == -1 && PyErr_Occurred())
            return -1;
        if (!overflow && c >= -1 && c < ERR_SLOTS - 1) {
            s->errs[c + 1] += n;
            return 0;
        }
    }
    if (s->other == NULL && (s->other = PyDict_New()) == NULL)
        return -1;
    PyObject *had = PyDict_GetItemWithError(s->other, code);
    if (had == NULL && PyErr_Occurred())
        return -1;
    unsigned long long before = had == NULL ? 0 : PyLong_AsUnsignedLongLong(had);
    if (before == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    PyObject *now = PyLong_FromUnsignedLongLong(before + n);
    if (now == NULL)
        return -1;
    int rc = PyDict_SetItem(s->other, code, now);
    Py_DECREF(now);
    return rc;
}

/* record(api_key, version, seconds, result): one answered request. `result` is the
   handler's response body: a dict's "error_code" is counted, and where its API version's
   schema keeps entries (the planner said so) the walker's codes too. */
static PyObject *Meter_record(Meter *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "record(api_key, version, seconds, result)");
        return NULL;
    }
    long api = PyLong_AsLong(args[0]);
    if (api == -1 && PyErr_Occurred())
        return NULL;
    long version = PyLong_AsLong(args[1]);
    if (version == -1 && PyErr_Occurred())
        return NULL;
    if (api < 0 || api >= MAX_API || version < 0 || version >= MAX_VERSION) {
        PyErr_Format(PyExc_ValueError, "API key %ld version %ld out of range", api, version);
        return NULL;
    }
    double v;
    if (sample_of(args[2], &v) < 0)
        return NULL;
    Slot *s = slot_for(self, api, version);
    if (s == NULL)
        return NULL;
    s->counts[bucket_of(self->edges, self->n, v)]++;
    s->sum += v;
    if (v > s->max)
        s->max = v;
    PyObject *result = args[3];
    if (!PyDict_CheckExact(result))
        Py_RETURN_NONE;
    PyObject *code = PyDict_GetItemWithError(result, s_error_code);
    if (code == NULL && PyErr_Occurred())
        return NULL;
    if (code != NULL && count_code(s, code, 1) < 0)
        return NULL;
    if (s->walk) {
        PyObject *found = PyObject_CallFunctionObjArgs(self->walker, result, s->lists, NULL);
        if (found == NULL)
            return NULL;
        if (!PyDict_Check(found)) {
            Py_DECREF(found);
            PyErr_SetString(PyExc_TypeError, "the walker answers a dict");
            return NULL;
        }
        PyObject *key, *value;
        Py_ssize_t pos = 0;
        while (PyDict_Next(found, &pos, &key, &value)) {
            unsigned long long k = PyLong_AsUnsignedLongLong(value);
            if ((k == (unsigned long long)-1 && PyErr_Occurred()) || count_code(s, key, k) < 0) {
                Py_DECREF(found);
                return NULL;
            }
        }
        Py_DECREF(found);
    }
    Py_RETURN_NONE;
}

/* slots() -> [(api_key, version, counts, sum, max, {code: count})], for scrapes and tests. */
static PyObject *Meter_slots(Meter *self, PyObject *unused)
{
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    for (int a = 0; a < MAX_API; a++) {
        Slot **row = self->rows[a];
        if (row == NULL)
            continue;
        for (int ver = 0; ver < MAX_VERSION; ver++) {
            Slot *s = row[ver];
            if (s == NULL)
                continue;
            PyObject *counts = PyList_New(self->n + 1);
            PyObject *errors = s->other != NULL ? PyDict_Copy(s->other) : PyDict_New();
            if (counts == NULL || errors == NULL)
                goto fail_item;
            for (Py_ssize_t i = 0; i <= self->n; i++) {
                PyObject *c = PyLong_FromUnsignedLongLong(s->counts[i]);
                if (c == NULL)
                    goto fail_item;
                PyList_SET_ITEM(counts, i, c);
            }
            for (int c = 0; c < ERR_SLOTS; c++) {
                if (s->errs[c] == 0)
                    continue;
                PyObject *k = PyLong_FromLong(c - 1), *n = PyLong_FromUnsignedLongLong(s->errs[c]);
                int rc = (k == NULL || n == NULL) ? -1 : PyDict_SetItem(errors, k, n);
                Py_XDECREF(k);
                Py_XDECREF(n);
                if (rc < 0)
                    goto fail_item;
            }
            PyObject *item = Py_BuildValue("(iiNddN)", a, ver, counts, s->sum, s->max, errors);
            if (item == NULL || PyList_Append(out, item) < 0) {
                Py_XDECREF(item);
                Py_DECREF(out);
                return NULL;
            }
            Py_DECREF(item);
            continue;
        fail_item:
            Py_XDECREF(counts);
            Py_XDECREF(errors);
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

static PyObject *Meter_get_bounds(Meter *self, void *closure)
{
    Py_INCREF(self->bounds);
    return self->bounds;
}

static PyMethodDef Meter_methods[] = {
    {"record", (PyCFunction)(void (*)(void))Meter_record, METH_FASTCALL, "Count one answered request."},
    {"slots", (PyCFunction)Meter_slots, METH_NOARGS, "What was counted, per API key and version."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Meter_getset[] = {
    {"bounds", (getter)Meter_get_bounds, NULL, "the latency buckets' upper bounds", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject MeterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "odradek.observability._hist.RequestMeter",
    .tp_basicsize = sizeof(Meter),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Latency buckets and error codes per API key and version (see stats.py).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Meter_init,
    .tp_dealloc = (destructor)Meter_dealloc,
    .tp_methods = Meter_methods,
    .tp_getset = Meter_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_hist", "Native counters for /metrics (see stats.py).", -1, NULL,
};

static int add_type(PyObject *m, const char *name, PyTypeObject *type)
{
    Py_INCREF(type);
    if (PyModule_AddObject(m, name, (PyObject *)type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    return 0;
}

PyMODINIT_FUNC PyInit__hist(void)
{
    if (PyType_Ready(&HistType) < 0 || PyType_Ready(&TimerType) < 0 || PyType_Ready(&MeterType) < 0)
        return NULL;
    if (s_error_code == NULL && (s_error_code = PyUnicode_InternFromString("error_code")) == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (add_type(m, "Histogram", &HistType) < 0 || add_type(m, "EventTimer", &TimerType) < 0 ||
            add_type(m, "RequestMeter", &MeterType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
