/* The C peer of `cargo xtask bench frame-hooks`: the smallest PEP 523 hook, as a C
 * extension author writes it (torchdynamo's shape without its callback): it chains to the
 * evaluator that was current when it was installed. Symbols come from the process's
 * global scope (the benchmark loads libpython with RTLD_GLOBAL). Call with the GIL held. */
#include <dlfcn.h>
#include <stddef.h>

typedef void *(*eval_fn)(void *tstate, void *frame, int throwflag);

static eval_fn previous;
static void *(*interp_get)(void);
static eval_fn (*get_eval)(void *interp);
static void (*set_eval)(void *interp, eval_fn f);

static void *passthrough(void *tstate, void *frame, int throwflag) {
    return previous(tstate, frame, throwflag);
}

static int resolve(void) {
    if (set_eval) return 0;
    interp_get = (void *(*)(void))dlsym(RTLD_DEFAULT, "PyInterpreterState_Get");
    get_eval = (eval_fn(*)(void *))dlsym(RTLD_DEFAULT, "_PyInterpreterState_GetEvalFrameFunc");
    set_eval = (void (*)(void *, eval_fn))dlsym(RTLD_DEFAULT, "_PyInterpreterState_SetEvalFrameFunc");
    return interp_get && get_eval && set_eval ? 0 : -1;
}

/* Installs the hook; returns 0, or -1 if libpython's symbols are not in the global scope. */
int fh_c_install(void) {
    if (resolve() != 0) return -1;
    void *interp = interp_get();
    previous = get_eval(interp);
    set_eval(interp, passthrough);
    return 0;
}

/* Restores the evaluator the hook chained to; -1 if the hook is not current. */
int fh_c_uninstall(void) {
    void *interp = interp_get();
    if (get_eval(interp) != passthrough) return -1;
    set_eval(interp, previous);
    return 0;
}
