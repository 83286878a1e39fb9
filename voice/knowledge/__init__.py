"""What a turn can look up: the knowledge base of local documents (`base`), what the user said in
other sessions (`recall`), and research, which consults both and stores a tool exchange (`research`)."""
