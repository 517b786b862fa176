/*
 * The /metrics histogram's hot half: `observe(value)` in C.
 *
 * Why native: every request records its latency, and every coordinator operation its
 * processing and queue time (KIP-848 "Broker Metrics"). Binning a sample in CPython
 * (a bisect, a list item, two attributes) costs about 140 ns; a steady
 * ConsumerGroupHeartbeat takes about 30 µs in all and carries three samples, which put
 * the cost of metrics on heartbeats over the 5 % the observability issue allows
 * (BENCHMARKS.md "Metrics"). Here a sample is one method call, a binary search over a
 * handful of doubles and three stores.
 *
 * Same semantics as the pure-Python twin in observability/stats.py (`PyHistogram`),
 * which the tests compare against this one: a value goes to the first bucket whose upper
 * bound is >= it (bisect_left: Prometheus' "le"), the last bucket is +Inf; `sum` and
 * `max` (0.0 until a larger value is seen) are kept as doubles.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef struct {
    PyObject_HEAD
    PyObject *bounds;      /* the bounds as given (a tuple of numbers) */
    double *edges;         /* the bounds as doubles, ascending */
    Py_ssize_t n;          /* number of bounds; counts has n + 1 slots */
    uint64_t *counts;
    double sum;
    double max;
} Hist;

static void Hist_dealloc(Hist *self)
{
    Py_XDECREF(self->bounds);
    PyMem_Free(self->edges);
    PyMem_Free(self->counts);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Hist_init(Hist *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"bounds", NULL};
    PyObject *bounds = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O", kwlist, &bounds))
        return -1;
    PyObject *seq = PySequence_Tuple(bounds);
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    double *edges = PyMem_Malloc(sizeof(double) * (n > 0 ? n : 1));
    uint64_t *counts = PyMem_Calloc(n + 1, sizeof(uint64_t));
    if (edges == NULL || counts == NULL) {
        PyMem_Free(edges);
        PyMem_Free(counts);
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        double v = PyFloat_AsDouble(PyTuple_GET_ITEM(seq, i));
        if (v == -1.0 && PyErr_Occurred()) {
            PyMem_Free(edges);
            PyMem_Free(counts);
            Py_DECREF(seq);
            return -1;
        }
        if (i > 0 && v <= edges[i - 1]) {
            PyMem_Free(edges);
            PyMem_Free(counts);
            Py_DECREF(seq);
            PyErr_SetString(PyExc_ValueError, "histogram bounds must be strictly ascending");
            return -1;
        }
        edges[i] = v;
    }
    Py_XSETREF(self->bounds, seq);
    PyMem_Free(self->edges);
    PyMem_Free(self->counts);
    self->edges = edges;
    self->counts = counts;
    self->n = n;
    self->sum = 0.0;
    self->max = 0.0;
    return 0;
}

static PyObject *Hist_observe(Hist *self, PyObject *arg)
{
    double v = PyFloat_AsDouble(arg);
    if (v == -1.0 && PyErr_Occurred())
        return NULL;
    /* A NaN duration is a bug upstream (and bisect and this search would bin it
       differently): refuse it. */
    if (v != v) {
        PyErr_SetString(PyExc_ValueError, "NaN observed");
        return NULL;
    }
    /* bisect_left: the first edge >= v; n (the +Inf bucket) when there is none. */
    Py_ssize_t lo = 0, hi = self->n;
    const double *e = self->edges;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) >> 1;
        if (e[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    self->counts[lo]++;
    self->sum += v;
    if (v > self->max)
        self->max = v;
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

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_hist", "Native histogram for /metrics (see stats.py).", -1, NULL,
};

PyMODINIT_FUNC PyInit__hist(void)
{
    if (PyType_Ready(&HistType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&HistType);
    if (PyModule_AddObject(m, "Histogram", (PyObject *)&HistType) < 0) {
        Py_DECREF(&HistType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
