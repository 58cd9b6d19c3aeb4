/* A program without libc, so that it links as a 32-bit executable
   (gcc -m32 -ffreestanding -nostdlib) on a machine without 32-bit libc:
   the fixture for 32-bit ELF (Elf32_Chdr compressed debug sections). */

int counter;

static int __attribute__((noinline)) triple(int x)
{
	return 3 * x + counter;
}

void _start(void)
{
	counter = triple(2);
	for (;;)
		;
}
