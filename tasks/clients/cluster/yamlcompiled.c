/* _modelplane_yaml: the documents of a YAML stream read straight into Python values with libyaml's parser.
 *
 * The optional compiled reader of tasks/clients/cluster/yamlcompiled.py (which documents what it guarantees).
 * read_documents() turns each document made only of mappings, sequences and untagged scalars into dicts, lists
 * and scalars, with no node objects in between; a document with anything else (an anchor, an alias, a tag, a
 * key that is a collection or written twice, nesting deeper than MAX_DEPTH, an explicit key in a flow sequence)
 * is returned as the caller's "not plain" marker, for the caller's own reader to build or refuse. A stream
 * libyaml refuses, or one with a %YAML or %TAG directive, gives None: the caller reads the whole file its own way.
 *
 * Plain scalars whose first byte can start something other than a string (the caller's table) are resolved by
 * the caller's function, so every int, float, bool and null is the value the caller's YAML 1.1 reader gives.
 *
 * Hostile input: no recursion (an explicit stack of MAX_DEPTH frames), every buffer bounded by libyaml's own
 * lengths, the parser and the current event deleted on every path, and every reference released when a
 * document is abandoned or an error ends the call.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <yaml.h>

#define MAX_DEPTH 100 /* nesting beyond this is left to the caller's reader, which refuses it (engine.yaml11.MAX_NESTING) */

typedef struct {
    PyObject *container; /* borrowed: owned by its parent collection, or by the document's root */
    PyObject *key;       /* owned: a mapping's key waiting for its value, else NULL */
    int flow_sequence;   /* a sequence written in flow style ([a, b]) */
} Frame;

typedef struct {
    PyObject *text;              /* the stream, for the character at a mark */
    Py_ssize_t index_shift;      /* 1 when the text starts with a byte order mark (libyaml's marks skip it) */
    PyObject *resolve;           /* callable(str) -> value or not_plain */
    PyObject *not_plain;         /* the caller's marker */
    const unsigned char *resolvable; /* 256 flags: a plain scalar starting with this byte is resolved */
    PyObject *root;              /* owned: the document's value so far */
    Py_ssize_t limit;            /* the most documents read: past it the caller's reader reads the stream */
    Frame stack[MAX_DEPTH];
    int depth;
    int plain;                   /* the document read so far is plain */
} Builder;

/* Drop the document built so far (its root owns every collection; the frames own only their keys). */
static void
builder_clear(Builder *b)
{
    int i;
    for (i = 0; i < b->depth; i++) {
        Py_CLEAR(b->stack[i].key);
    }
    b->depth = 0;
    Py_CLEAR(b->root);
}

/* The document is not plain: drop what was built and ignore its events until its end. */
static void
builder_abandon(Builder *b)
{
    builder_clear(b);
    b->plain = 0;
}

/* Add a node's value (a new reference, always consumed) to the collection being built, or make it the root.
 * Returns 0 when added, 1 when that made the document not plain (a key written twice), -1 on a Python error. */
static int
builder_add(Builder *b, PyObject *value)
{
    Frame *top;
    Py_ssize_t before;
    int failed;

    if (b->depth == 0) {
        if (b->root != NULL) { /* a document has one root node: never happens with libyaml's events */
            Py_DECREF(value);
            builder_abandon(b);
            return 1;
        }
        b->root = value;
        return 0;
    }
    top = &b->stack[b->depth - 1];
    if (PyList_CheckExact(top->container)) {
        failed = PyList_Append(top->container, value);
        Py_DECREF(value);
        return failed ? -1 : 0;
    }
    if (top->key == NULL) {
        top->key = value;
        return 0;
    }
    before = PyDict_GET_SIZE(top->container);
    failed = PyDict_SetItem(top->container, top->key, value);
    Py_DECREF(value);
    Py_CLEAR(top->key);
    if (failed) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError)) {
            return -1;
        }
        PyErr_Clear(); /* an unhashable key: left to the caller's reader */
        builder_abandon(b);
        return 1;
    }
    if (PyDict_GET_SIZE(top->container) == before) { /* a key equal to one already there */
        builder_abandon(b);
        return 1;
    }
    return 0;
}

/* Whether a mapping or sequence may not start here: a collection as a mapping key, or too deep. */
static int
builder_refuses_collection(Builder *b)
{
    if (b->depth >= MAX_DEPTH) {
        return 1;
    }
    return b->depth > 0 && !PyList_CheckExact(b->stack[b->depth - 1].container) && b->stack[b->depth - 1].key == NULL;
}

/* Whether a flow-style mapping starting at this event is the one-pair mapping of an explicit key (`[? a]`) in a
 * flow sequence: libyaml 0.2.5 and the newer libyaml PyYAML bundles read `[? ]` differently, so such a document
 * is left to the caller's reader. The mapping starts at the `?` then (at a `{` for a written mapping). */
static int
builder_explicit_flow_key(Builder *b, const yaml_event_t *event)
{
    Py_ssize_t index;

    if (b->depth == 0 || !b->stack[b->depth - 1].flow_sequence) {
        return 0;
    }
    if (event->data.mapping_start.style != YAML_FLOW_MAPPING_STYLE) {
        return 0;
    }
    index = (Py_ssize_t)event->start_mark.index + b->index_shift;
    if (index < 0 || index >= PyUnicode_GET_LENGTH(b->text)) {
        return 1;
    }
    return PyUnicode_READ_CHAR(b->text, index) != '{';
}

static int
builder_start_collection(Builder *b, const yaml_event_t *event)
{
    PyObject *container;
    int added, sequence = event->type == YAML_SEQUENCE_START_EVENT;

    if (sequence ? (event->data.sequence_start.anchor != NULL || event->data.sequence_start.tag != NULL)
                 : (event->data.mapping_start.anchor != NULL || event->data.mapping_start.tag != NULL
                    || builder_explicit_flow_key(b, event))) {
        builder_abandon(b);
        return 0;
    }
    if (builder_refuses_collection(b)) {
        builder_abandon(b);
        return 0;
    }
    container = sequence ? PyList_New(0) : PyDict_New();
    if (container == NULL) {
        return -1;
    }
    added = builder_add(b, container); /* consumes the reference: the parent (or the root) owns it now */
    if (added != 0) {
        return added < 0 ? -1 : 0;
    }
    b->stack[b->depth].container = container;
    b->stack[b->depth].key = NULL;
    b->stack[b->depth].flow_sequence = sequence && event->data.sequence_start.style == YAML_FLOW_SEQUENCE_STYLE;
    b->depth++;
    return 0;
}

static int
builder_end_collection(Builder *b)
{
    if (b->depth == 0 || b->stack[b->depth - 1].key != NULL) { /* never happens with libyaml's events */
        builder_abandon(b);
        return 0;
    }
    b->depth--;
    return 0;
}

static int
builder_scalar(Builder *b, const yaml_event_t *event)
{
    const char *text = (const char *)event->data.scalar.value;
    size_t length = event->data.scalar.length;
    PyObject *string, *value;

    if (event->data.scalar.anchor != NULL || event->data.scalar.tag != NULL) {
        builder_abandon(b);
        return 0;
    }
    if (length > (size_t)PY_SSIZE_T_MAX) {
        PyErr_NoMemory();
        return -1;
    }
    string = PyUnicode_DecodeUTF8(text, (Py_ssize_t)length, "strict");
    if (string == NULL) {
        return -1;
    }
    if (!event->data.scalar.plain_implicit || (length > 0 && !b->resolvable[(unsigned char)text[0]])) {
        return builder_add(b, string) < 0 ? -1 : 0;
    }
    value = PyObject_CallOneArg(b->resolve, string);
    Py_DECREF(string);
    if (value == NULL) {
        return -1;
    }
    if (value == b->not_plain) {
        Py_DECREF(value);
        builder_abandon(b);
        return 0;
    }
    return builder_add(b, value) < 0 ? -1 : 0;
}

/* Append the finished document as (line of its root node, value or not_plain); a plain null document (an
 * empty one, `~`) is left out, as the caller's reader skips it. 2 when that makes more documents than the limit. */
static int
builder_finish_document(Builder *b, PyObject *documents, size_t line)
{
    PyObject *item;
    int failed;

    if (b->plain && b->root == Py_None) {
        builder_clear(b);
        return 0;
    }
    if (PyList_GET_SIZE(documents) >= b->limit) {
        return 2;
    }
    item = Py_BuildValue("(nO)", (Py_ssize_t)line, b->plain && b->root != NULL ? b->root : b->not_plain);
    builder_clear(b);
    if (item == NULL) {
        return -1;
    }
    failed = PyList_Append(documents, item);
    Py_DECREF(item);
    return failed ? -1 : 0;
}

/* One event. Returns 1 at the stream's end, 0 to go on, -1 on a Python error, 2 when the stream is left to the
 * caller's reader (a directive, more documents than the limit). */
static int
builder_event(Builder *b, const yaml_event_t *event, PyObject *documents, size_t *line, int *first_node)
{
    if (*first_node && (event->type == YAML_SCALAR_EVENT || event->type == YAML_SEQUENCE_START_EVENT
                        || event->type == YAML_MAPPING_START_EVENT || event->type == YAML_ALIAS_EVENT)) {
        *line = event->start_mark.line;
        *first_node = 0;
    }
    switch (event->type) {
    case YAML_STREAM_END_EVENT:
        return 1;
    case YAML_DOCUMENT_START_EVENT:
        if (event->data.document_start.version_directive != NULL
            || event->data.document_start.tag_directives.start != event->data.document_start.tag_directives.end) {
            return 2;
        }
        builder_clear(b);
        b->plain = 1;
        *first_node = 1;
        *line = 0;
        return 0;
    case YAML_DOCUMENT_END_EVENT:
        return builder_finish_document(b, documents, *line);
    default:
        break;
    }
    if (!b->plain) {
        return 0;
    }
    switch (event->type) {
    case YAML_ALIAS_EVENT:
        builder_abandon(b);
        return 0;
    case YAML_SCALAR_EVENT:
        return builder_scalar(b, event);
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT:
        return builder_start_collection(b, event);
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
        return builder_end_collection(b);
    default:
        return 0;
    }
}

PyDoc_STRVAR(read_documents_doc,
             "read_documents(text, resolve, resolvable, not_plain, limit, /)\n--\n\n"
             "Each document of the YAML stream ``text`` as ``(line, value)``: the 0-based line of its root node and\n"
             "its value, or ``not_plain`` for a document with anchors, aliases, tags, collection or repeated keys,\n"
             "nesting deeper than 256 levels or an explicit key in a flow sequence. A plain scalar whose first byte\n"
             "is flagged in ``resolvable`` (256 bytes) or that is empty is passed to ``resolve``, which returns its\n"
             "value or ``not_plain``; other scalars are strings. Documents whose value is None are left out. None\n"
             "when libyaml refuses the stream, it has a %YAML or %TAG directive, or more than ``limit`` documents.");

static PyObject *
read_documents(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Builder b;
    yaml_parser_t parser;
    yaml_event_t event;
    const char *utf8;
    Py_ssize_t size, limit;
    Py_buffer table;
    PyObject *documents;
    size_t line = 0, events = 0;
    int first_node = 0, outcome = 0;

    (void)module;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "read_documents() takes 5 arguments (text, resolve, resolvable, not_plain, limit)");
        return NULL;
    }
    if (!PyUnicode_CheckExact(args[0]) || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "read_documents() needs a str and a callable");
        return NULL;
    }
    limit = PyLong_AsSsize_t(args[4]);
    if (limit == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (PyObject_GetBuffer(args[2], &table, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    if (table.len != 256) {
        PyBuffer_Release(&table);
        PyErr_SetString(PyExc_ValueError, "resolvable must hold 256 bytes");
        return NULL;
    }
    utf8 = PyUnicode_AsUTF8AndSize(args[0], &size);
    if (utf8 == NULL) { /* a lone surrogate: the caller's reader reports it its own way */
        PyBuffer_Release(&table);
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
            return NULL;
        }
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    documents = PyList_New(0);
    if (documents == NULL) {
        PyBuffer_Release(&table);
        return NULL;
    }
    memset(&b, 0, sizeof(b));
    b.text = args[0];
    b.index_shift = PyUnicode_GET_LENGTH(args[0]) > 0 && PyUnicode_READ_CHAR(args[0], 0) == 0xFEFF ? 1 : 0;
    b.resolve = args[1];
    b.not_plain = args[3];
    b.limit = limit;
    b.resolvable = (const unsigned char *)table.buf;
    if (!yaml_parser_initialize(&parser)) {
        Py_DECREF(documents);
        PyBuffer_Release(&table);
        return PyErr_NoMemory();
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)utf8, (size_t)size);
    while (outcome == 0) {
        if (!yaml_parser_parse(&parser, &event)) {
            outcome = parser.error == YAML_MEMORY_ERROR ? -3 : 2;
            break;
        }
        outcome = builder_event(&b, &event, documents, &line, &first_node);
        yaml_event_delete(&event);
        if (outcome == 0 && ++events % 4096 == 0 && PyErr_CheckSignals() < 0) { /* Ctrl-C on a large file */
            outcome = -1;
        }
    }
    builder_clear(&b);
    yaml_parser_delete(&parser);
    PyBuffer_Release(&table);
    if (outcome == 1) {
        return documents;
    }
    Py_DECREF(documents);
    if (outcome == 2) { /* libyaml refused the stream, a directive, too many documents: the caller reads it */
        Py_RETURN_NONE;
    }
    if (outcome == -3) {
        return PyErr_NoMemory();
    }
    return NULL; /* the Python error set */
}

PyDoc_STRVAR(libyaml_version_doc, "libyaml_version()\n--\n\nThe version of the libyaml this module is linked to.");

static PyObject *
libyaml_version(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return PyUnicode_FromString(yaml_get_version_string());
}

static PyMethodDef methods[] = {
    {"read_documents", (PyCFunction)(void (*)(void))read_documents, METH_FASTCALL, read_documents_doc},
    {"libyaml_version", libyaml_version, METH_NOARGS, libyaml_version_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "_modelplane_yaml",
    "YAML documents straight into Python values with libyaml (see tasks/clients/cluster/yamlcompiled.py).",
    0,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__modelplane_yaml(void)
{
    return PyModuleDef_Init(&module_def);
}
