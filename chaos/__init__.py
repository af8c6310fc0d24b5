"""The chaos suite: real beats on a real store through kills, freezes and store restarts."""
