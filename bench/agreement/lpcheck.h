/* Forced into memcheck's tests (gcc -include lpcheck.h): each leak check a
 * test asks memcheck for is asked of leakpath too, right after it (each is
 * a no-op where its tool is not running). */
#include <valgrind/memcheck.h>
#include <leakpath.h>
#undef VALGRIND_DO_LEAK_CHECK
#undef VALGRIND_DO_ADDED_LEAK_CHECK
#undef VALGRIND_DO_CHANGED_LEAK_CHECK
#undef VALGRIND_DO_QUICK_LEAK_CHECK
#define LP_CHECK_(full, delta)                                                  \
	do {                                                                    \
		VALGRIND_DO_CLIENT_REQUEST_STMT(VG_USERREQ__DO_LEAK_CHECK, full, \
						delta, 0, 0, 0);        \
		leakpath_leak_check();                                          \
	} while (0)
#define VALGRIND_DO_LEAK_CHECK LP_CHECK_(0, 0)
#define VALGRIND_DO_ADDED_LEAK_CHECK LP_CHECK_(0, 1)
#define VALGRIND_DO_CHANGED_LEAK_CHECK LP_CHECK_(0, 2)
#define VALGRIND_DO_QUICK_LEAK_CHECK LP_CHECK_(1, 0)
