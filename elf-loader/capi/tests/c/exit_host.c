/* Loads argv[1] in a namespace, hands it some data, and returns from main without
   deleting anything: the library's fini functions must run at exit, once. With a second
   argument "delete", deletes the namespace first (fini then runs at the delete, and not
   again at exit). */
#include "elf_loader.h"
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    elf_loader_namespace *ns = elf_loader_namespace_new("exit");
    elf_loader_library *lib = NULL;
    if (!ns || elf_loader_namespace_load(ns, argv[1], &lib) != 0) {
        fprintf(stderr, "load: %s\n", elf_loader_last_error());
        return 1;
    }
    void (*put)(const char *) = (void (*)(const char *))elf_loader_library_sym(lib, "exit_dtor_write");
    if (!put) {
        fprintf(stderr, "sym: %s\n", elf_loader_last_error());
        return 1;
    }
    put("data written before exit");
    fflush(stdout);
    if (argc > 2 && strcmp(argv[2], "delete") == 0) {
        elf_loader_library_delete(lib);
        elf_loader_namespace_delete(ns);
    }
    return 0;
}
