import unittest

from tasks.store import all_tasks


class StoreTest(unittest.TestCase):
    def test_tasks_have_ids_and_titles(self):
        self.assertEqual([task["id"] for task in all_tasks()], [1, 2])


if __name__ == "__main__":
    unittest.main()
