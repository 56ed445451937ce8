print("hello, but no process group")
